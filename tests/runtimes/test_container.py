"""docker, apptainer and image build their sandboxes from the same spec the same way: the harness
toolchain and our scripts read-only at fixed paths, HOME writable, the agent in the task's working
directory (the image's own folder, or the task's repo bound there), the task's environment and volumes,
and for network "proxy" nothing but the forwarder's loopback port, run by the toolchain's Python.

Pure argument construction: no engine needed (the engine tests: test_<kind>.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nemo_polar.contracts import TaskSpec
from nemo_polar.runtimes import toolchain
from nemo_polar.runtimes.apptainer import ApptainerRuntime, exec_argv, instance_name, start_argv, stop_argv
from nemo_polar.runtimes.base import Bind
from nemo_polar.runtimes.docker import container_kwargs, image_path
from nemo_polar.runtimes.spec import RuntimeSpec

PROXY = "http://127.0.0.1:8800"
ENV = {"PATH": "/opt/miniconda3/envs/testbed/bin:/usr/bin:/bin", "PIP_NO_INDEX": "1"}
IMAGES = {"docker": "swebench/sweb.eval.x86_64.a_1776_b-1:latest", "apptainer": "/sif/a.sif", "image": "/rootfs"}
TOOLS_PY = "/polar/tools/python/bin/python3"


@pytest.fixture
def no_engine(monkeypatch, tmp_path):
    """Runtimes built without an engine: docker's client and apptainer's binary are stand-ins."""
    import docker

    monkeypatch.setattr(docker, "from_env", lambda: None)
    monkeypatch.setenv("POLAR_APPTAINER_BIN", "/bin/true")
    tools = tmp_path / "tools"
    (tools / "python/bin").mkdir(parents=True)
    (tools / "python/bin/python3").touch()
    monkeypatch.setattr(toolchain, "TOOLS", tools)
    return tools


def runtime(kind: str, tmp_path: Path, **spec):
    rt = RuntimeSpec(kind=kind, image=IMAGES[kind], **spec).make(tmp_path / "root", "s1", PROXY)
    if rt.tunnel is not None:
        rt.tunnel.folder = tmp_path / "sock"  # where start() would put it
    return rt


@pytest.mark.parametrize("kind", list(IMAGES))
def test_every_kind_binds_the_toolchain_and_works_in_the_images_folder(kind, tmp_path, no_engine):
    rt = runtime(kind, tmp_path, workdir="/testbed", env=ENV, volumes=["/data/cache:/cache", "/scratch:/out:rw"])
    binds = {str(b.inside): b for b in rt.binds()}
    assert binds["/polar/tools"] == Bind(no_engine.resolve(), Path("/polar/tools"), False)
    assert binds["/polar/scripts"] == Bind(toolchain.SCRIPTS, Path("/polar/scripts"), False)
    assert binds["/polar/home"] == Bind(rt.home, Path("/polar/home"), True)
    assert binds["/polar/proxy"].writable is False  # the tunnel's socket: connect() needs no write access
    assert (binds["/cache"].writable, binds["/out"].writable) == (False, True)
    # no repo: the agent works in the image's own /testbed (nothing of ours bound over it)
    assert rt.work is None and rt.inside_work == Path("/testbed") and "/testbed" not in binds
    assert rt.in_image and rt.path == ENV["PATH"]
    inside = rt.inside()
    assert (inside.tools, inside.scripts, inside.home, inside.work) == (
        Path("/polar/tools"), Path("/polar/scripts"), Path("/polar/home"), Path("/testbed"),
    )  # fmt: skip
    assert rt.command_env({"K": "v"}) == {"HOME": "/polar/home", **ENV, "K": "v"}
    assert rt.forwarded(["sh"])[:4] == [TOOLS_PY, "-I", "-S", "/polar/scripts/forward.py"]


@pytest.mark.parametrize("kind", list(IMAGES))
def test_a_task_repo_is_bound_at_the_working_directory(kind, tmp_path, no_engine):
    rt = runtime(kind, tmp_path, repo=str(tmp_path), workdir="/src/app")
    binds = {str(b.inside): b for b in rt.binds()}
    assert binds["/src/app"] == Bind(rt.work, Path("/src/app"), True) and rt.work == rt.folder / "work"
    default = runtime(kind, tmp_path / "d", repo=str(tmp_path))
    assert default.inside_work == Path("/polar/work")


def test_docker_container(tmp_path, no_engine):
    rt = runtime("docker", tmp_path, workdir="/testbed", env=ENV, cpus=2, memory="2g", gpus=1)
    kw = container_kwargs(
        rt.spec, rt.settings, "polar-s1", rt.binds(), rt.forwarded(["sleep", "infinity"], True), "/testbed"
    )
    assert kw["network_mode"] == "none"  # nothing routable: the proxy only through the socket
    assert kw["volumes"][str(no_engine.resolve())] == {"bind": "/polar/tools", "mode": "ro"}
    assert kw["volumes"][str(rt.home)] == {"bind": "/polar/home", "mode": "rw"}
    assert kw["working_dir"] == "/testbed" and kw["environment"] == {"HOME": "/polar/home", **ENV}
    assert kw["command"] == [
        TOOLS_PY, "-I", "-S", "/polar/scripts/forward.py", "--ready", "127.0.0.1:8800", "/polar/proxy/proxy.sock",
        "--", "sleep", "infinity",
    ]  # fmt: skip
    assert kw["nano_cpus"] == 2_000_000_000 and kw["mem_limit"] == kw["memswap_limit"] == "2g"
    assert kw["device_requests"] == [{"Driver": "", "Count": 1, "Capabilities": [["gpu"]]}]
    assert rt.user is None  # the image's own folder: its owner's user; HOME is handed back at stop
    assert runtime("docker", tmp_path / "r", repo=str(tmp_path)).user is not None  # our copy: our uid


@pytest.mark.parametrize(("network", "mode"), [("none", "none"), ("host", "host")])
def test_docker_without_a_forwarder(tmp_path, no_engine, network, mode):
    rt = runtime("docker", tmp_path, network=network)
    kw = container_kwargs(
        rt.spec, rt.settings, "n", rt.binds(), rt.forwarded(["sleep", "infinity"], True), "/polar/work"
    )
    assert kw["network_mode"] == mode and kw["command"] == ["sleep", "infinity"]
    assert "/polar/proxy" not in str(kw["volumes"]) and "nano_cpus" not in kw and "device_requests" not in kw


def test_docker_path_is_the_tasks_else_the_images():
    attrs = {"Config": {"Env": ["LANG=C", "PATH=/opt/conda/bin:/usr/bin"]}}
    assert image_path(attrs, RuntimeSpec(kind="docker", image="i")) == "/opt/conda/bin:/usr/bin"
    assert image_path(attrs, RuntimeSpec(kind="docker", image="i", env={"PATH": "/x"})) == "/x"
    assert image_path({}, RuntimeSpec(kind="docker", image="i")).endswith("/usr/bin:/sbin:/bin")


def test_apptainer_instance_and_exec(tmp_path, no_engine):
    rt = runtime("apptainer", tmp_path, workdir="/testbed", env=ENV, cpus=2, memory="4g", gpus=1)
    argv = start_argv(
        "apptainer", rt.spec, rt.settings, "polar-s1", rt.binds(), rt.folder / "overlay", "/testbed", ["--fakeroot"]
    )
    assert argv[:7] == ["apptainer", "instance", "start", "--containall", "--overlay", str(rt.folder / "overlay"),
                        "--fakeroot"]  # fmt: skip
    assert argv[argv.index("--home") + 1] == f"{rt.home}:/polar/home"
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]
    assert f"{no_engine.resolve()}:/polar/tools:ro" in binds and f"{toolchain.SCRIPTS}:/polar/scripts:ro" in binds
    assert f"{tmp_path / 'sock'}:/polar/proxy:ro" in binds
    assert argv[argv.index("--pwd") + 1] == "/testbed" and "--nv" in argv
    assert argv[argv.index("--network") + 1] == "none" and argv[argv.index("--memory") + 1] == "4g"
    assert argv[-4:] == ["--env", "HOME=/polar/home", "/sif/a.sif", "polar-s1"]
    assert exec_argv("apptainer", "polar-s1", ["sh", "-c", "a,b"], {"K": "v,w"}, "/testbed") == [
        "apptainer", "exec", "--cleanenv", "--pwd", "/testbed", "instance://polar-s1",
        "env", "HOME=/polar/home", "K=v,w", "sh", "-c", "a,b",
    ]  # fmt: skip
    assert stop_argv("apptainer", "polar-s1") == ["apptainer", "instance", "stop", "--force", "polar-s1"]
    assert instance_name("a.b/c") == "polar-a-b-c"
    spec = RuntimeSpec(kind="apptainer", image="x.sif", network="host")
    host = start_argv("apptainer", spec, ApptainerRuntime.parse_settings(spec.options), "n", [], Path("/o"), "/w")
    assert "--net" not in host


def test_image_command(tmp_path, no_engine):
    rt = runtime("image", tmp_path, workdir="/testbed", env=ENV)
    argv = rt.argv(["echo", "hi"])
    assert argv[argv.index("--") + 1 :][:3] == [rt.sh, "-c", argv[argv.index("-c") + 1]]
    assert "lowerdir=$1" in argv[argv.index("-c") + 1]  # the overlay: the image read-only, the session's upper
    box = argv[argv.index(rt.bwrap) :]
    assert box[1:4] == ["--bind", str(rt.root), "/"]
    assert ["--ro-bind", str(no_engine.resolve()), "/polar/tools"] == box[box.index(str(no_engine.resolve())) - 1 :][
        :3
    ]
    assert box[box.index("--chdir") + 1] == "/testbed" and "--unshare-net" in box and "--unshare-pid" in box
    tail = box[box.index("--", 1) + 1 :]
    assert tail[:4] == [TOOLS_PY, "-I", "-S", "/polar/scripts/forward.py"] and tail[-2:] == ["echo", "hi"]
    host = runtime("image", tmp_path / "h", network="host").argv(["true"])
    assert "--unshare-net" not in host and host[-1] == "true"
    stacked = runtime("image", tmp_path / "s")
    stacked.layers = [Path("/task"), Path("/rootfs")]
    assert "/task:/rootfs" in stacked.argv(["true"])


@pytest.mark.parametrize(
    ("data", "names"),
    [
        ({"kind": "image"}, "runtime.image"),
        ({"kind": "image", "image": "relative/rootfs"}, "absolute"),
        ({"kind": "image", "image": "/r", "memory": "2g"}, "runtime.memory"),
        ({"kind": "image", "image": "/r", "gpus": 1}, "runtime.gpus"),
        ({"kind": "local", "workdir": "testbed"}, "workdir"),  # local takes one too (a Harbor task's /app)
        ({"kind": "local", "volumes": ["/a:/b:rx"]}, "runtime.volumes"),  # local takes them too (a script's folder)
        ({"kind": "docker", "image": "i", "workdir": "testbed"}, "workdir"),
        ({"kind": "docker", "image": "i", "workdir": "/polar/x"}, "/polar"),
        ({"kind": "docker", "image": "i", "volumes": ["/a"]}, "volumes"),
        ({"kind": "docker", "image": "i", "volumes": ["/a:/b:rx"]}, "volumes"),
        ({"kind": "docker", "image": "i", "env": {"HOME": "/x"}}, "HOME"),
        ({"kind": "docker", "image": "i", "env": {"A-B": "x"}}, "variable name"),
        ({"kind": "docker", "image": "i", "prepare": [{"command": ""}]}, "prepare.0.command"),
        ({"kind": "docker", "image": "i", "prepare": [{"command": "x", "retries": -1}]}, "retries"),
        ({"kind": "docker", "image": "i", "eval_prepare": [{"command": "x", "timeout": 5}]}, "timeout"),
    ],
)
def test_invalid_specs_name_the_key(data, names):
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as exc:
        TaskSpec.model_validate({"instruction": "x", "harness": {"name": "pi"}, "runtime": data})
    assert names in str(exc.value)


def test_steps_take_a_string_or_their_options():
    spec = RuntimeSpec(
        kind="image", image="/r", prepare=["git reset --hard abc", {"command": "make", "timeout_s": 30, "retries": 2}]
    )
    assert [(s.command, s.timeout_s, s.retries) for s in spec.prepare] == [
        ("git reset --hard abc", 600.0, 0),
        ("make", 30.0, 2),
    ]
    assert spec.eval_prepare is None  # grading's sandbox repeats `prepare`


@pytest.mark.parametrize("kind", list(IMAGES))
def test_the_images_own_repository_is_cut_at_the_tasks_commit_as_it_starts(kind, tmp_path, no_engine, monkeypatch):
    """What every kind runs in its sandbox once it is up (start's last step), before any set-up step or the
    agent: the history cut of the image's own folder (history.py). A task repository is cut as it is copied."""
    ran = []

    async def exec_(self, argv, env=None, timeout=None):
        ran.append(argv)
        return 0, "", ""

    rt = runtime(kind, tmp_path, workdir="/testbed", commit="abc123")
    monkeypatch.setattr(type(rt), "exec", exec_)
    asyncio.run(rt.cut_history())
    assert ran == [["sh", "/polar/scripts/cut_history.sh", "abc123"]]
    copied = runtime(kind, tmp_path / "r", repo=str(tmp_path), workdir="/testbed")
    asyncio.run(copied.cut_history())
    assert len(ran) == 1


def test_apptainer_ends_what_the_agent_left_with_one_exec(tmp_path, no_engine, monkeypatch):
    rt = runtime("apptainer", tmp_path, workdir="/testbed")
    rt.started, argvs = True, []

    async def run(argv, env, cwd, timeout):
        argvs.append(argv)
        return 0, "", ""

    monkeypatch.setattr(rt.groups, "run", run)
    assert asyncio.run(rt.quiesce()) == []
    (argv,) = argvs
    assert argv[:6] == ["/bin/true", "exec", "--cleanenv", "--pwd", "/testbed", "instance://polar-s1"]
    assert argv[-3:] == ["sh", "-c", "kill -9 -1 2>/dev/null; exit 0"]
