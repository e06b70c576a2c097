"""`harbor`: a Harbor task's own verifier, `tests/test.sh`, run in the session's sandbox, as Harbor runs it.

Every process the agent started is gone before the verifier starts (the gateway's `Runtime.quiesce`). /tests
and /logs are made anew, real folders (a link or a file the agent planted there is removed, and named in
`details.planted`), the task's tests/ go to /tests, and `/tests/test.sh > /logs/verifier/test-stdout.txt
2>&1` runs in the working directory under the verifier's timeout (`[verifier].timeout_sec`, or `timeout_s`)
with `[verifier].env`. Its exit code means nothing; the reward is what it wrote:

- /logs/verifier/reward.json, a flat object of finite numbers, wins over reward.txt (one number).
  The reward is its `reward_key` ("reward"); a file with a single key is that key's value (as Harbor's
  metrics read it); the other keys go to `details.rewards`.
- No reward file, an empty or unreadable one, a value that is not a finite number, several keys and
  none of them `reward_key`, or a verifier past its timeout: there is no valid reward, and the session
  is masked (`infrastructure_error`), never trained as 0. These are Harbor's own "no reward" errors
  (RewardFileNotFoundError, RewardFileEmptyError, VerifierOutputParseError, VerifierTimeoutError).

Where (`verifier`):
- `shared` (Harbor's default): the agent's own sandbox, after the agent, the verifier sharing what the
  agent did to its environment (a program it put on PATH, a package it installed): its runtime when the
  session ran in an image (docker, apptainer, image). For tasks whose work is that environment (install,
  configure, serve).
- `fresh`: a fresh sandbox of the task's image, with only the agent's working copy carried over, as the
  agent left it: nothing else the agent changed is there. For tasks whose work is the working copy (fix,
  write, compute): no program or package the agent planted runs in the verifier.
For a `local` session both are bubblewrap over the host's system folders (`sandbox.host_folders`: the
agent could change none of them), no network, with the working copy at the task's workdir and /tests and
/logs of their own (`local_box`); without bubblewrap the fixed paths cannot be made and the session is
masked. The steps are the same in all: the tests go in through HOME, the verifier runs, its logs come out
through HOME.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..config import Strict
from ..errors import EvaluationError
from ..sandbox import TIMEOUT_RC, bwrap, host_folders
from .base import EvalContext, Evaluation, Evaluator, Sandbox
from .boxes import FILES, HostBox

TESTS, LOGS = "/tests", "/logs/verifier"
STEP_TIMEOUT_S = 60.0  # copying the tests in and the logs out
RUN = f'cd "$1" && {TESTS}/test.sh > {LOGS}/test-stdout.txt 2>&1'
PLANTED = "planted: "
# /tests and /logs removed and made anew (on a local session they are mount points: emptied), then checked
# to be folders of their own; what the agent left there is said first
SET_UP = f"""
for p in {TESTS} /logs {LOGS}; do if [ -L "$p" ]; then echo "{PLANTED}$p is a link"; fi; done
if [ -d {LOGS} ] && [ -n "$(ls -A {LOGS} 2>/dev/null)" ]; then echo "{PLANTED}files in {LOGS}"; fi
rm -rf {TESTS} /logs 2>/dev/null
mkdir -p {TESTS} /logs && find {TESTS} /logs -mindepth 1 -delete && mkdir -p {LOGS} || exit 3
for p in {TESTS} /logs {LOGS}; do if [ -L "$p" ] || [ ! -d "$p" ]; then echo "$p is not a folder" >&2; exit 3; fi; done
cp -R "$1/." {TESTS}/ && chmod +x {TESTS}/test.sh
"""
COLLECT = f'mkdir -p "$1" && cp -Rp {LOGS}/. "$1/"'  # -p: when each file was written


class HarborFields(BaseModel):
    """The dataset row's `harbor` block (`tasks/harbor.py:HarborTask.fields`)."""

    model_config = ConfigDict(extra="allow")

    path: str = Field(min_length=1, description="the task folder; its tests/ are the verifier")
    workdir: str = "/app"
    verifier_timeout_s: float = Field(600.0, gt=0)
    verifier_env: dict[str, str] = Field(default_factory=dict)


class HarborSettings(Strict):
    timeout_s: float | None = Field(None, gt=0, description="the verifier's timeout instead of the task's")
    verifier: Literal["auto", "shared", "fresh"] = Field(
        "auto",
        description="shared: in the agent's sandbox (Harbor's way: tasks whose work is the environment); fresh: in a "
        "fresh sandbox of the task's image, only the agent's working copy carried over; auto: shared when the agent "
        "changed nothing outside its working copy, else fresh, masked when only its own sandbox pays",
    )
    reward_key: str = Field("reward", min_length=1, description="the key of reward.json that is the reward")
    env: dict[str, str] = Field(default_factory=dict, description="over the task's [verifier].env")


class HarborEvaluator(Evaluator):
    name = "harbor"
    Settings = HarborSettings

    async def evaluate(self, ctx: EvalContext) -> Evaluation:
        try:
            row = HarborFields.model_validate(ctx.fields.get("harbor"))
        except ValidationError as exc:
            return Evaluation.infra(f"not a Harbor task row: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}")
        tests = Path(row.path) / "tests"
        if not (tests / "test.sh").is_file():
            return Evaluation.infra(f"{tests}/test.sh: no such file")
        mode = self.settings.verifier
        if ctx.sandbox is None:  # on this machine the agent could change nothing but its working copy
            return await self.judge(ctx, row, "local", lambda: _ready(self.local_box(ctx, row)))
        if mode == "auto" and ctx.changed_outside == []:
            mode = "shared"  # nothing else of the environment is the agent's: as good as fresh
        if mode == "shared":
            return await self.judge(ctx, row, mode, lambda: _ready(ctx.sandbox))
        fresh = await self.judge(ctx, row, "fresh", lambda: self.fresh_box(ctx))
        if mode == "fresh" or fresh.reward is None:
            return fresh
        shared = await self.judge(ctx, row, "shared", lambda: _ready(ctx.sandbox))
        planted = {"planted": shared.details["planted"]} if shared.details.get("planted") else {}
        if shared.reward is not None and shared.reward > fresh.reward:
            why = (
                f"the reward rests on what the agent changed outside its working copy: {shared.reward:g} in its own "
                f"sandbox, {fresh.reward:g} in a fresh one (verifier: shared pays it, for tasks whose work is there)"
            )
            return Evaluation.infra(why, **fresh.details, **planted, outside_paid=shared.reward)
        return fresh.model_copy(update={"details": fresh.details | planted})

    async def judge(
        self, ctx: EvalContext, row: HarborFields, where: str, box: Callable[[], Awaitable[Sandbox]]
    ) -> Evaluation:
        """One run of the verifier in the sandbox `box` gives, and its reward as Harbor reads it."""
        timeout = min(self.settings.timeout_s or row.verifier_timeout_s, ctx.timeout_s)
        logs = ctx.scratch / f"verifier-{where}"
        started = time.monotonic()
        planted: list[str] = []
        try:
            rc, problem = await self.verify(await box(), row, timeout, logs, planted)
        except (EvaluationError, OSError) as exc:
            rc, problem = None, f"the verifier could not run: {exc}"
        details: dict[str, Any] = {"test_rc": rc, "verifier_s": round(time.monotonic() - started, 3)}
        details |= {"verifier": where} | ({"planted": planted} if planted else {})
        details["log_tail"] = _tail(logs / "test-stdout.txt")
        if problem is None and rc == TIMEOUT_RC:
            problem = f"the verifier timed out after {timeout:g} s"
        if problem is not None:
            return Evaluation.infra(problem, **details)
        rewards, problem = read_rewards(logs)
        if problem is not None:
            return Evaluation.infra(problem, **details)
        key, problem = pick(rewards, self.settings.reward_key)
        if problem is not None:
            return Evaluation.infra(problem, rewards=rewards, **details)
        reward = float(rewards[key])
        return Evaluation(
            reward=reward, components={key: reward}, details=details | {"rewards": rewards, "reward_key": key}
        )

    async def fresh_box(self, ctx: EvalContext) -> Sandbox:
        if ctx.fresh_work is None:
            raise EvaluationError("the session ran in an image, but no fresh sandbox of it can be made")
        return await ctx.fresh_work()

    def local_box(self, ctx: EvalContext, row: HarborFields) -> HostBox:
        """A local session's working copy at the task's workdir, in bubblewrap over the host's folders, with
        /tests and /logs of its own (scratch folders) and HOME at /root."""
        if bwrap() is None:
            raise EvaluationError("a local Harbor task needs bubblewrap (its /tests, /logs/verifier and workdir)")
        if ctx.work is None:
            raise EvaluationError("no working copy to verify")
        top = row.workdir.strip("/").split("/")[0]
        if not top or os.path.lexists("/" + top):
            raise EvaluationError(
                f"workdir {row.workdir!r} is under the host's /{top}: a local run cannot bind it there"
            )
        fixed = ctx.scratch / "fixed"
        binds = [(fixed / "tests", TESTS), (fixed / "logs", "/logs")]
        for folder, _ in binds:
            folder.mkdir(parents=True, exist_ok=True)
        return HostBox(
            ctx.work,
            ctx.scratch / "home",
            sandbox=True,
            inside_work=row.workdir,
            inside_home="/root",
            binds=binds,
            root=host_folders(leave_out=(top,)),
        )

    async def verify(
        self, box: Sandbox, row: HarborFields, timeout: float, logs: Path, planted: list[str]
    ) -> tuple[int | None, str | None]:
        """In `box`: the tests in through HOME, the verifier's run, its logs out to `logs` through HOME; what
        the agent had planted in the verifier's folders goes to `planted`."""
        hand, env = box.home / FILES, row.verifier_env | self.settings.env
        await _replace(Path(row.path) / "tests", hand / "tests")
        inside = str(box.inside_home / FILES)
        rc, out, err = await box.exec(["sh", "-c", SET_UP, "set-up", f"{inside}/tests"], None, STEP_TIMEOUT_S)
        planted += [line.removeprefix(PLANTED) for line in out.splitlines() if line.startswith(PLANTED)]
        if rc != 0:
            return rc, f"making {TESTS} and {LOGS} failed (rc {rc}): {(err or out).strip()[-500:]}"
        rc, _, err = await box.exec(["sh", "-c", RUN, "verifier", str(box.inside_work)], env, timeout)
        ended = time.time()
        if rc not in (0, TIMEOUT_RC) and err.startswith("bwrap:"):
            return rc, f"the verifier's sandbox failed: {err.strip()[-500:]}"
        left = await box.quiesce()  # what the code it ran left behind must not write the reward from here on
        done, out, err = await box.exec(["sh", "-c", COLLECT, "collect", f"{inside}/verifier"], None, STEP_TIMEOUT_S)
        if done != 0 and rc != TIMEOUT_RC:
            return rc, f"reading {LOGS} back failed (rc {done}): {(err or out).strip()[-500:]}"
        await _replace(hand / "verifier", logs)
        late = [p.name for p in logs.glob("reward.*") if p.stat().st_mtime > ended]
        if late:  # written by something that outlived the verifier: not the verifier's word
            planted += [f"{name} written after the verifier ended (by {left or 'a process it left'})" for name in late]
            for name in late:
                (logs / name).unlink()
        return rc, None


def read_rewards(logs: Path) -> tuple[dict[str, float], str | None]:
    """The rewards a verifier wrote to `logs` (reward.json over reward.txt), or why there are none."""
    as_json, as_text = logs / "reward.json", logs / "reward.txt"
    if as_json.is_file():
        text = as_json.read_text(errors="replace")
        if not text.strip():
            return {}, "reward.json is empty"
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            return {}, f"reward.json is not JSON: {exc}"
        if not isinstance(data, dict) or not data:
            return {}, "reward.json is not a flat object of numbers"
        for key, value in data.items():
            # bool is an int in Python, and Harbor takes true/false as 1/0: so do we
            if not isinstance(value, int | float) or not math.isfinite(value):
                return {}, f"reward.json: {key}: {value!r} is not a finite number"
        return {k: float(v) for k, v in data.items()}, None
    if as_text.is_file():
        text = as_text.read_text(errors="replace")
        if not text.strip():
            return {}, "reward.txt is empty"
        try:
            value = float(text)
        except ValueError:
            return {}, f"reward.txt: {text.strip()[:100]!r} is not a number"
        if not math.isfinite(value):
            return {}, f"reward.txt: {value!r} is not a finite number"
        return {"reward": value}, None
    return {}, f"the verifier wrote no reward ({LOGS}/reward.json or reward.txt)"


def pick(rewards: dict[str, float], key: str) -> tuple[str, str | None]:
    """Which of `rewards` is the reward: `key`, else the only one."""
    if key in rewards:
        return key, None
    if len(rewards) == 1:
        return next(iter(rewards)), None
    return key, f"reward.json has keys {sorted(rewards)} and no {key!r}: set the evaluator's reward_key"


async def _replace(src: Path, dest: Path) -> None:
    def copy() -> None:
        shutil.rmtree(dest, ignore_errors=True)
        if src.is_dir():
            shutil.copytree(src, dest, symlinks=True)

    await asyncio.to_thread(copy)


async def _ready(box: Sandbox) -> Sandbox:
    return box


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""
