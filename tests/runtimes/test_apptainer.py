"""ApptainerRuntime where `apptainer` is installed (its commands: test_container.py)."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

from nemo_polar.runtimes.spec import RuntimeSpec

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
        rt = spec.make(tmp_path, "a1", proxy.url)
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
