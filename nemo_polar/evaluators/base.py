"""What every evaluator is given and what it gives back.

An evaluator turns one finished session into a reward. It reads the dataset row (`fields`), its own
config, the agent's working copy and the pristine task repo; it must not import the server or the
proxy. Its commands run in a `Sandbox`, whatever the session ran in: when it ran in an image (docker,
apptainer, image), `sandbox` is the agent's runtime (the patch is read there) and `fresh()` gives a
fresh runtime of the same image with its `eval_prepare` steps done (the tests run there); otherwise the
evaluator makes the same from the folders on this machine (`boxes.HostBox`). Two outcomes are kept
apart on purpose:

- a reward (possibly 0.0): the agent's work was judged — an empty patch, a patch that does not
  apply and failing tests are all the agent's doing and score 0;
- `infrastructure_error`: the judgement could not be made (no repo, the test command would not start,
  git failed). Such a session is masked from training, never scored 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field, model_validator

from ..plugins import Plugin
from ..states import SessionState

REL_TOL = 1e-6  # components vs reward (NeMo-RL checks the same sum at 1e-5)


class Sandbox(Protocol):
    """Where an evaluator runs commands (a session's runtime, or `boxes.HostBox`): in the working copy,
    with HOME a host folder."""

    home: Path  # host folder, seen inside as `inside_home`: how files go in and out
    inside_home: Path
    inside_work: Path  # the working copy, where commands start
    sandboxed: bool

    async def exec(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str]: ...

    async def quiesce(self) -> list[str]:
        """Every process its commands left running killed (what was)."""
        ...


@dataclass
class EvalContext:
    """One session as an evaluator sees it. `scratch` is the evaluator's own folder: `prewarm` and
    `evaluate` of the same session get the same one, and the caller deletes it afterwards."""

    fields: dict[str, Any]
    config: dict[str, Any]
    work: Path | None  # the working copy on this machine; None when it is inside `sandbox`
    scratch: Path
    repo: Path | None = None
    exit_code: int | None = None
    status: SessionState = SessionState.COMPLETED
    home: Path | None = None  # the harness's HOME: nothing under it belongs to the patch
    patch: str | None = None  # a patch the harness submitted itself; else it is read from `work`
    timeout_s: float = 1200.0  # the whole evaluation; the caller may lower it to the session's budget
    sandbox: Sandbox | None = None  # the agent's runtime, when the session ran in an image
    fresh: Callable[[], Awaitable[Sandbox]] | None = None  # a fresh one of the same image (started once)
    fresh_work: Callable[[], Awaitable[Sandbox]] | None = None  # that one, with the agent's working copy in it
    changed_outside: list[str] | None = None  # what the agent changed outside its working copy (None: unknown)
    # held while the evaluation copy is made: `evaluate` waits for a `prewarm` still making it, never makes a second
    preparing: asyncio.Lock = field(default_factory=asyncio.Lock)


class Evaluation(BaseModel):
    """An evaluator's verdict. `components` are the additive parts of the reward: they always sum to
    `reward` (NeMo-RL checks this), so partial-credit diagnostics such as test fractions go in
    `details`, not here. When `infrastructure_error` is set, `reward` is None and the session is masked."""

    reward: float | None = None
    components: dict[str, float] = Field(default_factory=dict)
    infrastructure_error: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> Evaluation:
        if self.infrastructure_error is not None:
            if self.reward is not None:
                raise ValueError("an infrastructure error has no reward")
        elif self.reward is None:
            raise ValueError("an evaluation needs a reward or an infrastructure_error")
        elif self.components and abs(sum(self.components.values()) - self.reward) > REL_TOL * max(1, self.reward):
            raise ValueError(f"components {self.components} do not sum to reward {self.reward}")
        return self

    @classmethod
    def infra(cls, message: str, **details: Any) -> Evaluation:
        return cls(infrastructure_error=message, details=details)


# what in an evaluation's details shows the agent reached for the grader rather than the task (counted per
# session by the rollout server's metrics and in the Gym result, so a trainer sees attempted hacks)
GRADER_TOUCHES = {
    "left_out": "test_surface",
    "tampered": "runner_tampered",
    "planted": "verifier_planted",
    "outside_paid": "environment_paid",
}


def grader_touches(details: dict[str, Any]) -> list[str]:
    """The kinds of `GRADER_TOUCHES` an evaluation's details hold (non-empty)."""
    return [kind for key, kind in GRADER_TOUCHES.items() if details.get(key)]


class Evaluator(Plugin):
    """Base of the evaluators: `Settings` validates the task's `evaluator.config` (unknown keys are errors)."""

    kind = "evaluator"

    async def prewarm(self, ctx: EvalContext) -> None:
        """Prepare what `evaluate` needs while the agent still runs (optional); it must be safe for
        `evaluate` to run without it."""

    async def evaluate(self, ctx: EvalContext) -> Evaluation:
        raise NotImplementedError


@dataclass
class Completed:
    argv: list[str]
    rc: int | None  # None: it could not start (see `error`)
    out: str = ""
    err: str = ""
    timed_out: bool = False
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.rc == 0
