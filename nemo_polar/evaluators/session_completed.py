"""`session_completed`: 1.0 when the harness finished on its own with exit code 0, else 0.0."""

from __future__ import annotations

from ..states import SessionState
from .base import EvalContext, Evaluation, Evaluator


class SessionCompleted(Evaluator):
    name = "session_completed"

    async def evaluate(self, ctx: EvalContext) -> Evaluation:
        reward = float(ctx.status is SessionState.COMPLETED and ctx.exit_code == 0)
        return Evaluation(
            reward=reward,
            components={"session_completed": reward},
            details={"status": ctx.status.value, "exit_code": ctx.exit_code},
        )
