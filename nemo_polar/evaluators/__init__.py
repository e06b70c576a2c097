"""Evaluators: a finished session -> reward. One module per evaluator, named in `nemo_polar.plugins`.

Modules load on first use, so `swebench` (an optional extra) costs nothing until a task asks for it.
A task may also name its own class as `"package.module:Class"` (a subclass of `Evaluator`).
"""

from __future__ import annotations

from ..contracts import EvaluatorSpec
from ..plugins import EVALUATORS
from .base import EvalContext, Evaluation, Evaluator

__all__ = ["EVALUATORS", "EvalContext", "Evaluation", "Evaluator", "evaluator_class", "make_evaluator"]


def evaluator_class(kind: str) -> type[Evaluator]:
    """The class a task's `evaluator.kind` names; `UnknownPlugin` (a ConfigError) names the known ones."""
    return EVALUATORS[kind]


def make_evaluator(spec: EvaluatorSpec) -> Evaluator:
    """The evaluator a task names, its config validated (unknown keys are errors naming the key)."""
    return evaluator_class(spec.kind)(spec.config)
