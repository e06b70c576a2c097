"""A task's set-up steps (`runtime.prepare` before the agent, `runtime.eval_prepare` before grading),
run in order in the session's sandbox, each with its timeout and its retries."""

from __future__ import annotations

import asyncio
import logging
import shlex
import time
from collections.abc import Sequence
from typing import Any

from ..errors import SetupFailed
from .base import Runtime
from .spec import Step

log = logging.getLogger("nemo_polar.gateway")
TAIL = 2000  # characters of a failed step's output kept in its error


async def run_steps(runtime: Runtime, steps: Sequence[Step], what: str = "prepare") -> list[dict[str, Any]]:
    """Each step with `sh -c` in the working directory; a step that fails is tried again `retries` times.
    Returns one report per step ({command, rc, tries, seconds}); raises SetupFailed on a last failed try."""
    reports = []
    for n, step in enumerate(steps):
        t0, delay = time.monotonic(), step.backoff_s
        for attempt in range(step.retries + 1):
            rc, out, err = await runtime.exec(["sh", "-c", step.command], step.env, timeout=step.timeout_s)
            if rc == 0:
                break
            log.info("%s step %d (%s) failed with rc %s, try %d", what, n, step.command[:80], rc, attempt + 1)
            if attempt < step.retries:
                await asyncio.sleep(delay)
                delay *= 2
        report = {"command": step.command, "rc": rc, "tries": attempt + 1, "seconds": round(time.monotonic() - t0, 3)}
        reports.append(report)
        if rc != 0:
            why = "timed out" if rc == 124 else f"rc {rc}"
            raise SetupFailed(
                f"{what}[{n}] `{shlex.quote(step.command)[:200]}` failed after {attempt + 1} tries ({why}): "
                f"{(err or out).strip()[-TAIL:]}"
            )
    return reports
