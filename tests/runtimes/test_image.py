"""The `image` runtime on Debian's minbase root filesystem (scripts/setup.sh rootfs): nothing of this
machine inside but the session's binds, the toolchain's Python and Node.js running where the image has
neither, writes kept in the session's overlay, only the proxy reachable, set-up steps with retries, and
nothing left behind (no process, no mount, no folder)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nemo_polar.cli.runtime_check import ROOTFS, leftovers
from nemo_polar.errors import SetupFailed
from nemo_polar.runtimes import TIMEOUT_RC, toolchain
from nemo_polar.runtimes.spec import RuntimeSpec
from nemo_polar.runtimes.steps import run_steps

PY = "/polar/tools/python/bin/python3"


@pytest.fixture(scope="module")
def rootfs() -> Path:
    if not (ROOTFS / "bin" / "sh").exists():
        pytest.fail(f"no root filesystem at {ROOTFS}: run scripts/setup.sh rootfs")
    if not (toolchain.TOOLS / toolchain.PYTHON).exists():
        pytest.fail(f"no harness toolchain at {toolchain.TOOLS}: run scripts/setup.sh mini node")
    return ROOTFS


def session(spec: RuntimeSpec, root: Path, proxy_url: str, body):
    async def run():
        rt = spec.make(root, "s1", proxy_url)
        await rt.start()
        try:
            return rt, await body(rt)
        finally:
            await rt.stop()

    return asyncio.run(run())


def test_a_session_sees_the_image_and_reaches_only_the_proxy(rootfs, proxy, tmp_path):
    spec = RuntimeSpec(kind="image", image=str(rootfs), workdir="/srv/app", env={"POLAR_X": "1"})
    host_only = Path(__file__).resolve()  # this checkout: not in the image

    async def body(rt):
        probe = f"import urllib.request; print(urllib.request.urlopen('{rt.proxy_url}/health').read())"
        return {
            "proxy": await rt.exec([PY, "-I", "-c", probe]),
            "outside": await rt.exec([PY, "-I", "-c", "import socket; socket.create_connection(('1.1.1.1', 53), 3)"]),
            "image": await rt.exec(["sh", "-c", f"pwd; echo $POLAR_X $HOME; cat /etc/debian_version; ls {host_only}"]),
            "no_python": await rt.exec(["sh", "-c", "command -v python3 python node || echo none"]),
            "node": await rt.exec(["/polar/tools/node/bin/node", "-e", "console.log(process.version)"]),
            "write": await rt.exec(["sh", "-c", "echo x > /etc/polar-was-here && cat /etc/polar-was-here"]),
            "slow": await rt.exec(["sleep", "30"], timeout=1),
            "pids": list(rt.groups.started),
        }

    rt, out = session(spec, tmp_path / "root", proxy.url, body)
    assert out["proxy"][0] == 0 and "nemo_polar-proxy" in out["proxy"][1], out["proxy"]
    assert out["outside"][0] != 0
    rc, text, err = out["image"]
    assert text.split()[:4] == ["/srv/app", "1", "/polar/home", text.split()[3]] and text.split()[3].startswith("12")
    assert rc != 0 and "No such file" in err  # the host's files are not there
    assert out["no_python"][1].strip() == "none"  # the image has neither: the toolchain brings its own
    assert out["node"][0] == 0 and out["node"][1].startswith("v")
    assert out["write"] == (0, "x\n", "")
    assert out["slow"][0] == TIMEOUT_RC
    assert not (rootfs / "etc" / "polar-was-here").exists()  # the write stayed in the session's overlay
    assert not rt.folder.exists() and leftovers(tmp_path / "root", out["pids"]) == []


def test_set_up_steps_retry_and_a_last_failure_names_the_step(rootfs, tmp_path):
    spec = RuntimeSpec(kind="image", image=str(rootfs), network="none")
    flaky = {"command": "test -f /tmp/tried || { touch /tmp/tried; exit 3; }", "retries": 1, "backoff_s": 0}

    async def body(rt):
        ok = await run_steps(rt, RuntimeSpec.model_validate({**spec.model_dump(), "prepare": [flaky]}).prepare)
        bad = RuntimeSpec.model_validate({**spec.model_dump(), "prepare": ["true", "echo broken >&2; exit 5"]})
        with pytest.raises(SetupFailed, match=r"prepare\[1\].*1 tries \(rc 5\): broken"):
            await run_steps(rt, bad.prepare)
        return ok

    _, reports = session(spec, tmp_path / "root", "http://127.0.0.1:1", body)
    assert [(r["rc"], r["tries"]) for r in reports] == [(0, 2)]


def test_layers_stack_a_task_over_the_root_filesystem(rootfs, tmp_path):
    layer = tmp_path / "task"
    (layer / "testbed").mkdir(parents=True)
    (layer / "testbed" / "README").write_text("the task's own repository\n")
    spec = RuntimeSpec(kind="image", image=f"{layer}:{rootfs}", workdir="/testbed", network="none")

    async def body(rt):
        return await rt.exec(["sh", "-c", "cat README; echo changed > README; cat /etc/debian_version"])

    rt, (rc, out, _) = session(spec, tmp_path / "root", "http://127.0.0.1:1", body)
    assert rc == 0 and out.startswith("the task's own repository\n12")
    assert (layer / "testbed" / "README").read_text() == "the task's own repository\n"  # read-only below
    assert rt.work is None and not rt.folder.exists()
