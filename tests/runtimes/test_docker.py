"""DockerRuntime on a real engine: the tests' own dockerd (tests/conftest.py `docker`), images imported from the
set-up's Debian root filesystems (its arguments alone: test_container.py)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys

import pytest

from nemo_polar.daemons import identity
from nemo_polar.errors import ConfigError
from nemo_polar.local.docker_engine import DockerEngine, image_name
from nemo_polar.runtimes import TIMEOUT_RC
from nemo_polar.runtimes.docker import ROOT_LABEL, DockerRuntime, container_name, exec_argv
from nemo_polar.runtimes.spec import RuntimeSpec

from ..conftest import requires_docker

IMAGE = image_name("bookworm-python")  # python3 for the probes; the harness toolchain comes from /polar/tools


def test_names_and_exec_deadlines():
    assert container_name("a/b c") == "polar-a-b-c"
    assert exec_argv(["make"], None) == ["make"]
    assert exec_argv(["make"], 5) == ["timeout", "-k", "2", "5.000", "make"]


# the memory limit, then the CPU quota and period, as the container's own cgroup says (v1, else v2)
CGROUP_LIMITS = (
    "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpu/cpu.cfs_quota_us"
    " /sys/fs/cgroup/cpu/cpu.cfs_period_us 2>/dev/null || cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/cpu.max"
)


def _connects(host: str, port: int) -> str:
    """A python3 one-liner that prints `open` if a TCP connection to host:port is made within 3 s."""
    return f"import socket; socket.create_connection(({host!r}, {port}), 3); print('open')"


def _host_addresses() -> list[str]:
    """This machine's own IPv4 addresses (its interfaces'), as a container would try to reach it."""
    found = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    return sorted(found | {"127.0.0.1", "172.17.0.1"})  # and docker's usual bridge gateway


@requires_docker
def test_a_session_reaches_the_proxy_and_nothing_else_and_goes_away(docker, proxy, tmp_path):
    """Two sessions' containers side by side. From the first: the proxy answers through the forwarder; the host's
    other ports (a listener on every address of this machine), the second session's own listener, an outside
    address and the engine's socket are all out of reach; the limits read back from its cgroup are those asked
    for; both containers and their folders go at stop."""
    listener = socket.create_server(("0.0.0.0", 0))  # a port on the host that is not the proxy's
    host_port = listener.getsockname()[1]
    spec = RuntimeSpec(kind="docker", image=IMAGE, cpus=1, memory="512m")
    other_spec = RuntimeSpec(kind="docker", image=IMAGE)
    attempts = {f"host {a}:{host_port}": _connects(a, host_port) for a in _host_addresses()}
    attempts |= {
        "the other session's listener (127.0.0.1:9999)": _connects("127.0.0.1", 9999),
        "an outside address (1.1.1.1:53)": _connects("1.1.1.1", 53),
        "a package registry by name (pypi.org:443)": _connects("pypi.org", 443),
        "the engine's socket": f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({str(docker.socket)!r})",
    }

    async def body():
        first, other = spec.make(tmp_path / "a", "d1", proxy.url), other_spec.make(tmp_path / "b", "d2", proxy.url)
        await first.start()
        await other.start()
        try:
            # the second session serves a port of its own; its own loopback reaches it
            serving = "import socket,time; s=socket.create_server(('127.0.0.1', 9999)); time.sleep(30)"
            serve = asyncio.ensure_future(other.exec(["python3", "-c", serving], timeout=20))
            await asyncio.sleep(1.5)
            own = await other.exec(["python3", "-c", _connects("127.0.0.1", 9999)])
            probe = f"import urllib.request; print(urllib.request.urlopen('{first.proxy_url}/health').read())"
            ok = await first.exec(["python3", "-c", probe])
            tried = {what: await first.exec(["python3", "-c", code]) for what, code in attempts.items()}
            limits = await first.exec(["sh", "-c", CGROUP_LIMITS])
            wrote = await first.exec(["sh", "-c", f"echo hi > {first.inside_work}/f && cat {first.inside_work}/f"])
            slow = await first.exec(["sleep", "30"], timeout=1)
            serve.cancel()
            return first, other, own, ok, tried, limits, wrote, slow
        finally:
            await first.stop()
            await other.stop()

    try:
        first, other, own, ok, tried, limits, wrote, slow = asyncio.run(body())
    finally:
        listener.close()
    assert own[0] == 0 and own[1].strip() == "open"  # the listener was there to be found
    assert ok[0] == 0 and "nemo_polar-proxy" in ok[1]
    reached = {what: r for what, r in tried.items() if r[0] == 0 or "open" in r[1]}
    assert reached == {}, reached
    assert len(tried) >= 6
    numbers = [int(x) for x in limits[1].replace("max", "0").split()]
    memory, cpu = numbers[0], numbers[1] / numbers[2]
    assert memory == 512 * 2**20 and cpu == 1.0, limits
    assert wrote == (0, "hi\n", "")
    assert slow[0] == TIMEOUT_RC
    assert not first.folder.exists() and not other.folder.exists()
    assert docker.containers() == []


@requires_docker
def test_the_agent_works_in_the_images_own_folder_with_the_toolchain(docker, proxy, tmp_path):
    spec = RuntimeSpec(kind="docker", image=image_name("bookworm"), workdir="/srv/app", env={"POLAR_X": "1"})

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


@requires_docker
def test_a_nodes_leftover_containers_are_found_by_its_folder_and_no_others(docker, proxy, tmp_path):
    """What a node killed mid-session leaves is found by the label of the node's folder: only that node's."""
    spec = RuntimeSpec(kind="docker", image=image_name("bookworm"))

    async def leave(root):
        rt = spec.make(root, f"left-{root.name}", proxy.url)
        await rt.start()  # and never stopped, as by a node killed with -9
        return rt

    mine, theirs = asyncio.run(leave(tmp_path / "mine")), asyncio.run(leave(tmp_path / "theirs"))
    assert len(docker.containers()) == 2
    import docker as sdk

    labelled = sdk.from_env().containers.list(filters={"label": f"{ROOT_LABEL}={(tmp_path / 'mine').resolve()}"})
    assert [c.name for c in labelled] == [mine.instance]
    assert DockerRuntime.reap(tmp_path / "mine") == [mine.instance]
    assert len(docker.containers()) == 1  # the other node's is left alone
    assert DockerRuntime.reap(tmp_path / "theirs") == [theirs.instance] and docker.containers() == []
    for rt in (mine, theirs):
        asyncio.run(rt.stop())


@pytest.mark.parametrize("kind", ["docker"])
def test_reap_without_an_engine_finds_nothing(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    assert DockerRuntime.reap(tmp_path) == []


@requires_docker
def test_a_build_context_is_built_once_per_content_and_its_run_steps_are_there(docker, proxy, tmp_path):
    """`runtime.build`: the Dockerfile is built on the engine (what its RUN steps make is in the image, not only
    what it copies), tagged by the context's content so a second session reuses it, and run as the image."""
    context = tmp_path / "environment"
    context.mkdir()
    (context / "hello.txt").write_text("copied\n")
    (context / "Dockerfile").write_text(
        f"FROM {image_name('bookworm-python')}\nWORKDIR /app\nCOPY hello.txt .\n"
        "RUN python3 -c \"open('/app/made.txt', 'w').write('built')\" && mkdir -p /opt/tool\n"
    )
    spec = RuntimeSpec(kind="docker", build=str(context), workdir="/app")

    async def session(sid):
        rt = spec.make(tmp_path / "root", sid, proxy.url)
        await rt.start()
        try:
            return rt.settings.image, await rt.exec(["sh", "-c", "cat hello.txt made.txt; test -d /opt/tool"])
        finally:
            await rt.stop()

    first_image, first = asyncio.run(session("b1"))
    built = docker.client("image", "inspect", "--format", "{{.Created}}", first_image).stdout
    second_image, second = asyncio.run(session("b2"))
    assert first == second == (0, "copied\nbuilt", "")
    assert first_image == second_image and first_image.startswith("polar-build:")
    assert docker.client("image", "inspect", "--format", "{{.Created}}", second_image).stdout == built  # not rebuilt
    (context / "hello.txt").write_text("changed\n")
    assert asyncio.run(session("b3"))[0] != first_image  # new content, new image


@requires_docker
def test_a_build_from_an_image_the_engine_lacks_names_it(docker, proxy, tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM example.invalid/no-such-image:1\nRUN true\n")
    rt = RuntimeSpec(kind="docker", build=str(tmp_path)).make(tmp_path / "root", "b4", proxy.url)
    with pytest.raises(ConfigError, match=r"FROM example.invalid/no-such-image:1, which this engine does not have"):
        asyncio.run(rt.start())
    assert docker.containers() == [] and not rt.folder.exists()


def test_docker_takes_an_image_or_a_build_context_not_both():
    with pytest.raises(ValueError, match="runtime.image or runtime.build"):
        RuntimeSpec(kind="docker", image="a", build="/b")
    with pytest.raises(ValueError, match="runtime.image or runtime.build"):
        RuntimeSpec(kind="docker")


@requires_docker
def test_polar_cluster_docker_up_status_down_leaves_nothing(tmp_path):
    """The user's engine: `polar cluster docker up` starts it with the set-up's images, `status` says where it
    listens, `down` stops it by the pid it started; no dockerd of it, no mount under its folder, is left."""
    root = tmp_path / "engine"

    def polar(*argv: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "nemo_polar.cli", "cluster", "docker", *argv, "--root", str(root), "--json"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    engine = DockerEngine(root)
    try:
        up = polar("up")
        assert up["ready"] and {image_name("bookworm"), image_name("bookworm-python")} <= set(up["images"])
        assert up["docker_host"] == engine.env["DOCKER_HOST"] and up["containers"] == []
        pid = engine.daemon().pid
        assert engine.mounts()  # its overlay and namespaces, while it runs
        down = polar("down")
    finally:
        engine.down()
    assert down["stopped"] == [f"dockerd {pid}"]
    assert identity(pid) is None and engine.mounts() == [] and not engine.socket.exists()


@requires_docker
def test_an_images_own_repository_holds_nothing_of_its_future_once_the_session_starts(docker, proxy, tmp_path):
    """A SWE image whose /testbed is a clone with the fix in its future (history_repo.py), as SWE-bench shipped
    them: its sessions, the agent's and the one that grades (a fresh one), start cut at the task's commit."""
    from nemo_polar.tasks.bundled import TASKS
    from tests.redteam.history_repo import build

    context = tmp_path / "environment"
    row = build(next(t for t in TASKS if t.name == "roman"), context / "testbed")
    (context / "Dockerfile").write_text(f"FROM {IMAGE}\nCOPY testbed /testbed\n")
    spec = RuntimeSpec(kind="docker", build=str(context), workdir="/testbed", commit=row["base_commit"])
    probe = "git log --all --format=%H; git rev-parse HEAD; git status --porcelain; git stash list; ls .git"

    async def session(sid):
        rt = spec.make(tmp_path / "root", sid, proxy.url)
        await rt.start()
        try:
            return await rt.exec(["sh", "-c", probe])
        finally:
            await rt.stop()

    rc, out, err = asyncio.run(session("h1"))
    lines = out.split()
    assert rc == 0 and lines[:2] == [row["base_commit"]] * 2, (out, err)  # one commit: the task's, its hash kept
    assert "ORIG_HEAD" not in lines and "FETCH_HEAD" not in lines and "logs" not in lines
