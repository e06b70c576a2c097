"""Evaluators: a finished session -> reward. One module per evaluator; this table names them.

Modules load on first use, so `swebench` (an optional extra) costs nothing until a task asks for it.
A task may also name its own class as `"package.module:Class"` (a subclass of `Evaluator`).
"""

from __future__ import annotations

import importlib

from ..errors import ConfigError
from ..server.contracts import EvaluatorSpec
from .base import EvalContext, Evaluation, Evaluator

EVALUATORS: dict[str, tuple[str, str]] = {
    "session_completed": ("nemo_polar.evaluators.session_completed", "SessionCompleted"),
    "tests": ("nemo_polar.evaluators.tests", "TestsEvaluator"),
    "swebench": ("nemo_polar.evaluators.swebench", "SwebenchEvaluator"),
    "answer": ("nemo_polar.evaluators.answer", "AnswerMatches"),
}

__all__ = ["EVALUATORS", "EvalContext", "Evaluation", "Evaluator", "evaluator_class", "make_evaluator"]


def evaluator_class(kind: str) -> type[Evaluator]:
    if kind in EVALUATORS:
        module, name = EVALUATORS[kind]
    elif ":" in kind:
        module, name = kind.split(":", 1)
    else:
        raise ConfigError(f"evaluator.kind: unknown evaluator {kind!r}: choose from {sorted(EVALUATORS)}")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"evaluator.kind: cannot load {kind!r}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Evaluator)):
        raise ConfigError(f"evaluator.kind: {kind!r} is not an Evaluator")
    return cls


def make_evaluator(spec: EvaluatorSpec) -> Evaluator:
    """The evaluator a task names, its config validated (unknown keys are errors naming the key)."""
    return evaluator_class(spec.kind)(spec.config)
