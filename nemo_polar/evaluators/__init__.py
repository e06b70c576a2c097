"""Evaluators: a finished session -> reward. One module per evaluator, named in `EVALUATORS`; a task
may also name its own `Evaluator` subclass as `"package.module:Class"`. `swebench` (an optional
extra) costs nothing until a task asks for it."""

from __future__ import annotations

from ..plugins import Registry
from .base import EvalContext, Evaluation, Evaluator

EVALUATORS: Registry[Evaluator] = Registry(
    "evaluator",
    Evaluator,
    {
        "session_completed": f"{__name__}.session_completed:SessionCompleted",
        "tests": f"{__name__}.tests:TestsEvaluator",
        "swebench": f"{__name__}.swebench:SwebenchEvaluator",  # the `swebench` extra
        "answer": f"{__name__}.answer:AnswerMatches",
    },
)

__all__ = ["EVALUATORS", "EvalContext", "Evaluation", "Evaluator"]
