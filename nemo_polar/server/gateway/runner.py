"""Run one harness launch to completion: its own HOME and working copy, bounded in time, its
process group stopped whatever happens."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from ...local.vllm_server import stop_group
from .harnesses import Launch


@dataclass
class Exit:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False


def run_launch(launch: Launch, home: Path, workdir: Path, timeout_s: float) -> Exit:
    home.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    launch.write_files(home)
    proc = subprocess.Popen(
        launch.argv,
        env=launch.env,
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return Exit(proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        stop_group(proc.pid, grace_s=5)
        out, err = proc.communicate()
        return Exit(proc.returncode, out, err, timed_out=True)
    finally:
        if proc.poll() is None:
            stop_group(proc.pid, grace_s=5)
