"""DockerRuntime: the container spec as a pure function; engine tests where an engine answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nemo_polar.contracts import RuntimeSpec
from nemo_polar.server.gateway.runtimes import TIMEOUT_RC, make_runtime
from nemo_polar.server.gateway.runtimes.base import FORWARD_SCRIPT
from nemo_polar.server.gateway.runtimes.docker import container_kwargs, container_name, exec_argv

IMAGE = "python:3.11-slim"


def _engine_reason() -> str | None:
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:  # noqa: BLE001 - any failure means: no engine to test against
        return f"no docker engine answers here ({type(exc).__name__}): engine tests need one"
    return None


def test_the_container_for_network_proxy(tmp_path):
    work, home, sock = tmp_path / "w", tmp_path / "h", Path("/tmp/polar-x")
    spec = RuntimeSpec(kind="docker", image=IMAGE, cpus=2, memory="2g")
    kw = container_kwargs(spec, "polar-s1", work, home, sock, ["127.0.0.1:8800"], user="1000:1000")
    assert kw["image"] == IMAGE and kw["name"] == "polar-s1" and kw["detach"] and kw["init"]
    assert kw["network_mode"] == "none"  # nothing routable: the proxy only through the socket
    assert kw["volumes"] == {
        str(work): {"bind": "/polar/work", "mode": "rw"},  # fixed: the same in every session
        str(home): {"bind": "/polar/home", "mode": "rw"},
        str(sock): {"bind": "/polar/proxy", "mode": "ro"},
        str(FORWARD_SCRIPT): {"bind": "/polar/forward.py", "mode": "ro"},
    }
    assert kw["command"] == [
        "python3", "-I", "-S", "/polar/forward.py", "--ready", "127.0.0.1:8800", "/polar/proxy/proxy.sock",
        "--", "sleep", "infinity",
    ]  # fmt: skip
    assert kw["nano_cpus"] == 2_000_000_000 and kw["mem_limit"] == kw["memswap_limit"] == "2g"
    assert kw["working_dir"] == "/polar/work" and kw["environment"] == {"HOME": "/polar/home"}
    assert kw["user"] == "1000:1000"


@pytest.mark.parametrize(("network", "mode"), [("none", "none"), ("host", "host")])
def test_the_container_without_a_forwarder(tmp_path, network, mode):
    spec = RuntimeSpec(kind="docker", image=IMAGE, network=network)
    kw = container_kwargs(spec, "n", tmp_path / "w", tmp_path / "h")
    assert kw["network_mode"] == mode and kw["command"] == ["sleep", "infinity"]
    assert len(kw["volumes"]) == 2 and "nano_cpus" not in kw and "mem_limit" not in kw


def test_names_and_exec_deadlines():
    assert container_name("a/b c") == "polar-a-b-c"
    assert exec_argv(["make"], None) == ["make"]
    assert exec_argv(["make"], 5) == ["timeout", "-k", "2", "5.000", "make"]


# --- a real engine ---------------------------------------------------------------------------------
needs_engine = pytest.mark.skipif(_engine_reason() is not None, reason=_engine_reason() or "")


@needs_engine
def test_a_container_session_reaches_only_the_proxy_and_goes_away(proxy, tmp_path):
    import docker

    spec = RuntimeSpec(kind="docker", image=IMAGE, cpus=1, memory="512m")

    async def body():
        rt = make_runtime(spec, tmp_path, "d1", proxy.url)
        await rt.start()
        try:
            probe = f"import urllib.request; print(urllib.request.urlopen('{rt.proxy_url}/health').read())"
            ok = await rt.exec(["python3", "-c", probe])
            blocked = await rt.exec(["python3", "-c", "import socket; socket.create_connection(('1.1.1.1', 53), 3)"])
            wrote = await rt.exec(["sh", "-c", f"echo hi > {rt.inside_work}/f && cat {rt.inside_work}/f"])
            slow = await rt.exec(["sleep", "30"], timeout=1)
            return rt, ok, blocked, wrote, slow
        finally:
            await rt.stop()

    rt, ok, blocked, wrote, slow = asyncio.run(body())
    assert ok[0] == 0 and "nemo_polar-proxy" in ok[1]
    assert blocked[0] != 0
    assert wrote == (0, "hi\n", "")
    assert slow[0] == TIMEOUT_RC
    assert not rt.folder.exists()
    assert not docker.from_env().containers.list(all=True, filters={"name": rt.name})


@needs_engine
def test_a_failed_start_leaves_no_container(tmp_path):
    spec = RuntimeSpec(kind="docker", image="polar-no-such-image:0", network="none")
    rt = make_runtime(spec, tmp_path, "d2", "http://127.0.0.1:1")
    with pytest.raises(Exception):  # noqa: B017 - the SDK's ImageNotFound
        asyncio.run(rt.start())
    assert not rt.folder.exists()
