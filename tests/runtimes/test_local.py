"""LocalRuntime: a session folder, commands in their own process group, bubblewrap where present."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest

from nemo_polar.runtimes import TIMEOUT_RC
from nemo_polar.runtimes.local import LocalRuntime

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap not installed (apt-get install bubblewrap)"
)


def go(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def alive_in_group(pgid: int, grace_s: float = 3.0) -> list[int]:
    """Processes of that group still running after `grace_s` (a SIGKILLed process takes a moment to
    exit on a loaded machine; zombies are dead: only their exit status is left)."""
    deadline = time.monotonic() + grace_s
    while (pids := _in_group(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pids


def _in_group(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def test_working_copy_home_and_stop(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_text("hello\n")

    async def body():
        rt = LocalRuntime(tmp_path / "sessions", repo=repo, sandbox=False, session_id="s1")
        await rt.start()
        rc, out, err = await rt.exec(["sh", "-c", "cat README; echo $HOME; pwd"])
        assert rc == 0, err
        assert out.split() == ["hello", str(rt.inside_home), str(rt.inside_work)]
        rc, _, _ = await rt.exec(["sh", "-c", "exit 3"])
        assert rc == 3
        await rt.stop()
        return rt

    rt = go(body())
    assert not rt.folder.exists() and (repo / "README").exists()


@needs_bwrap
def test_bwrap_confines_writes_to_work_and_home(tmp_path):
    outside_tmp = tmp_path / "escape.txt"  # /tmp is private inside: this must not reach the host
    outside_host = Path.home() / f".polar-escape-{uuid.uuid4().hex}"  # not there inside

    async def body():
        rt = LocalRuntime(tmp_path / "sessions", sandbox=True)
        assert rt.sandboxed
        await rt.start()
        try:
            ok = await rt.exec(["sh", "-c", f"echo w > {rt.inside_work}/a && echo h > {rt.inside_home}/b"])
            bad_host = await rt.exec(["sh", "-c", f"echo x > {outside_host}"])
            bad_tmp = await rt.exec(["sh", "-c", f"echo x > {outside_tmp}"])
            return rt, ok, bad_host, bad_tmp, (rt.work / "a").read_text(), (rt.home / "b").read_text()
        finally:
            await rt.stop()

    rt, ok, bad_host, bad_tmp, a, b = go(body())
    assert ok[0] == 0 and (a, b) == ("w\n", "h\n")
    assert not outside_host.exists()  # the host's home is not even there
    assert not outside_tmp.exists()
    assert not rt.folder.exists()


@pytest.mark.parametrize("sandbox", [pytest.param(True, marks=needs_bwrap), False])
def test_hanging_command_killed_at_timeout(tmp_path, sandbox):
    async def body():
        rt = LocalRuntime(tmp_path, sandbox=sandbox)
        await rt.start()
        t0 = time.monotonic()
        # a child in the background as well: the whole group must go, not just the leader
        rc, out, _ = await rt.exec(["sh", "-c", "echo started; sleep 1000 & sleep 1000"], timeout=0.5)
        elapsed = time.monotonic() - t0
        await rt.stop()
        return rt, rc, out, elapsed

    rt, rc, out, elapsed = go(body())
    assert rc == TIMEOUT_RC and out == "started\n"
    assert elapsed < 5
    (pid,) = rt.groups.started
    assert alive_in_group(pid) == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not rt.folder.exists()


def test_stop_kills_a_running_exec(tmp_path):
    async def body():
        rt = LocalRuntime(tmp_path, sandbox=True)
        await rt.start()
        task = asyncio.create_task(rt.exec(["sleep", "1000"]))
        while not rt.groups.started:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        await rt.stop()
        rc, _, _ = await asyncio.wait_for(task, 10)
        return rt, rc

    rt, rc = go(body())
    assert rc != 0
    assert alive_in_group(rt.groups.started[0]) == []
    assert not rt.folder.exists()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_every_sandboxed_session_sees_the_same_paths(tmp_path):
    """GRPO groups samples by their first prompt, and harnesses put their working directory in it."""

    async def one(sid: str):
        rt = LocalRuntime(tmp_path / "sessions", session_id=sid)
        await rt.start()
        try:
            rc, out, _ = await rt.exec(["sh", "-c", "pwd; echo $HOME; echo x > here"])
            return rc, out, rt.work, (rt.work / "here").read_text()
        finally:
            await rt.stop()

    (rc_a, seen_a, host_a, wrote_a), (rc_b, seen_b, host_b, _) = asyncio.run(one("a")), asyncio.run(one("b"))
    assert rc_a == rc_b == 0 and host_a != host_b
    assert seen_a == seen_b == "/tmp/polar/work\n/tmp/polar/home\n"
    assert wrote_a == "x\n"  # and the fixed path is the session's own folder on the host


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_the_sandbox_sees_the_hosts_programs_and_none_of_its_data(tmp_path):
    """The system's folders and this Python are there, read-only; a folder of the host's own (a dataset, a
    run folder, a task repository) is not, unless the task's `volumes` name it."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "tasks.jsonl").write_text('{"patch": "the gold fix"}\n')

    async def body(volumes):
        rt = LocalRuntime(tmp_path / "sessions", session_id=f"t{len(volumes)}", volumes=volumes)
        await rt.start()
        try:
            return (
                await rt.exec([sys.executable, "-c", "print('python ran')"]),
                await rt.exec(["cat", str(data / "tasks.jsonl")]),
                await rt.exec(["sh", "-c", f"echo x > {data}/w"]),
            )
        finally:
            await rt.stop()

    (py, read, write) = asyncio.run(body([]))
    assert py[0] == 0 and py[1] == "python ran\n", py
    assert read[0] != 0 and "gold" not in read[1] and write[0] != 0
    (py, read, write) = asyncio.run(body([f"{data}:{data}"]))
    assert read[0] == 0 and "gold fix" in read[1]
    assert write[0] != 0 and not (data / "w").exists()  # read-only unless :rw


def test_a_host_path_a_command_names_that_the_sandbox_lacks_is_named(tmp_path):
    script = tmp_path / "agent.py"
    script.write_text("print('hi')\n")
    rt = LocalRuntime(tmp_path / "sessions", session_id="u")
    assert rt.unseen(["sh", "-c", f"python3 {script} --out /usr/bin"]) == [str(script)]
    seen = LocalRuntime(tmp_path / "sessions", session_id="v", volumes=[f"{tmp_path}:{tmp_path}"])
    assert seen.unseen(["sh", "-c", f"python3 {script}"]) == [] and rt.unseen(["true"]) == []
