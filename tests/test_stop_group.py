"""`stop_group`: a server's whole process group stopped, and at once when it leaves on SIGTERM."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from nemo_polar.sandbox import stop_group

# a group leader with a child of its own (as vLLM's API server and its engine), both leaving on SIGTERM
SLEEP = "import time; time.sleep(60)"
TREE = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {SLEEP!r}]); time.sleep(60)"
# one that ignores SIGTERM
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_a_group_that_leaves_on_sigterm_is_stopped_without_waiting_the_grace():
    leader = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    time.sleep(1.0)  # its child started
    started = time.monotonic()
    stop_group(leader, grace_s=15)
    # the leader's zombie, reaped as it went, no longer holds the group for the whole grace
    assert time.monotonic() - started < 5 and not _group_alive(leader.pid) and leader.returncode is not None


def test_what_ignores_sigterm_is_killed_after_the_grace():
    stubborn = subprocess.Popen([sys.executable, "-c", STUBBORN], start_new_session=True, stdout=subprocess.PIPE)
    assert stubborn.stdout.readline() == b"ready\n"
    started = time.monotonic()
    stop_group(stubborn, grace_s=1)
    stubborn.wait(5)
    assert time.monotonic() - started >= 1 and stubborn.returncode == -9
