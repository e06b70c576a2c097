"""ApptainerRuntime: its commands as pure functions; engine tests where `apptainer` is installed."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from nemo_polar.contracts import RuntimeSpec
from nemo_polar.server.gateway.runtimes import make_runtime
from nemo_polar.server.gateway.runtimes.apptainer import exec_argv, instance_name, start_argv, stop_argv
from nemo_polar.server.gateway.runtimes.base import FORWARD_SCRIPT

W, H, OV, S = Path("/r/s1/work"), Path("/r/s1/home"), Path("/r/s1/overlay"), Path("/tmp/polar-x")


def test_start_for_network_proxy_with_limits():
    spec = RuntimeSpec(kind="apptainer", image="/img/py.sif", cpus=2, memory="4g")
    assert start_argv("apptainer", spec, "polar-s1", W, H, OV, S) == [
        "apptainer", "instance", "start", "--containall", "--overlay", str(OV),
        "--home", f"{H}:/polar/home", "--bind", f"{W}:/polar/work", "--pwd", "/polar/work",
        "--net", "--network", "none",
        "--bind", f"{S}:/polar/proxy:ro", "--bind", f"{FORWARD_SCRIPT}:/polar/forward.py:ro",
        "--cpus", "2.0", "--memory", "4g",
        "--env", "HOME=/polar/home", "/img/py.sif", "polar-s1",
    ]  # fmt: skip


def test_start_for_host_network_has_no_namespace_or_forwarder():
    argv = start_argv("apptainer", RuntimeSpec(kind="apptainer", image="x.sif", network="host"), "n", W, H, OV)
    assert "--net" not in argv and "/polar/proxy" not in " ".join(argv)


def test_exec_keeps_the_hosts_environment_out():
    argv = exec_argv("apptainer", "polar-s1", ["sh", "-c", "a,b"], {"K": "v,w"})
    assert argv == [
        "apptainer", "exec", "--cleanenv", "--pwd", "/polar/work", "instance://polar-s1",
        "env", "HOME=/polar/home", "K=v,w", "sh", "-c", "a,b",
    ]  # fmt: skip
    assert stop_argv("apptainer", "polar-s1") == ["apptainer", "instance", "stop", "--force", "polar-s1"]
    assert instance_name("a.b/c") == "polar-a-b-c"


needs_apptainer = pytest.mark.skipif(
    shutil.which("apptainer") is None, reason="apptainer is not installed: engine tests need it"
)


@needs_apptainer
def test_an_instance_session_runs_and_goes_away(proxy, tmp_path):
    image = os.environ.get("POLAR_TEST_SIF")
    if not image:
        pytest.skip("set POLAR_TEST_SIF to a .sif with python3 to run the apptainer engine test")
    spec = RuntimeSpec(kind="apptainer", image=image)

    async def body():
        rt = make_runtime(spec, tmp_path, "a1", proxy.url)
        await rt.start()
        try:
            probe = f"import urllib.request; print(urllib.request.urlopen('{rt.proxy_url}/health').read())"
            return rt, await rt.exec(["python3", "-c", probe]), await rt.exec(["sh", "-c", "echo $HOME"])
        finally:
            await rt.stop()

    rt, ok, home = asyncio.run(body())
    assert ok[0] == 0 and "nemo_polar-proxy" in ok[1]
    assert home[1].strip() == str(rt.inside_home) == "/polar/home"
    assert not rt.folder.exists()
