"""DockerRuntime on a real engine, where one answers (its arguments: test_container.py)."""

from __future__ import annotations

import asyncio

import pytest

from nemo_polar.runtimes import TIMEOUT_RC
from nemo_polar.runtimes.docker import container_name, exec_argv
from nemo_polar.runtimes.spec import RuntimeSpec

IMAGE = "python:3.11-slim"


def _engine_reason() -> str | None:
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:  # noqa: BLE001 - any failure means: no engine to test against
        return f"no docker engine answers here ({type(exc).__name__}): engine tests need one"
    return None


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
        rt = spec.make(tmp_path, "d1", proxy.url)
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
    assert not docker.from_env().containers.list(all=True, filters={"name": rt.instance})


@needs_engine
def test_the_agent_works_in_the_images_own_folder_with_the_toolchain(proxy, tmp_path):
    spec = RuntimeSpec(kind="docker", image=IMAGE, workdir="/srv/app", env={"POLAR_X": "1"})

    async def body():
        rt = spec.make(tmp_path, "d3", proxy.url)
        await rt.start()
        try:
            return rt, await rt.exec(["sh", "-c", "pwd; echo $POLAR_X; ls /polar/tools"])
        finally:
            await rt.stop()

    rt, (rc, out, _) = asyncio.run(body())
    assert rc == 0 and out.split()[:2] == ["/srv/app", "1"] and "node" in out
    assert not rt.folder.exists()


@needs_engine
def test_a_failed_start_leaves_no_container(tmp_path):
    spec = RuntimeSpec(kind="docker", image="polar-no-such-image:0", network="none")
    rt = spec.make(tmp_path, "d2", "http://127.0.0.1:1")
    with pytest.raises(Exception):  # noqa: B017 - the SDK's ImageNotFound
        asyncio.run(rt.start())
    assert not rt.folder.exists()
