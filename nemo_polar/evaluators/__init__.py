"""Evaluators: a finished session -> reward. One module per evaluator: its class (an `Evaluator` with a
`name`) is the registration; a task may also name its own subclass as `"package.module:Class"`.
Classes load on first use, so `swebench` (an optional extra) costs nothing until a task asks for it."""

from __future__ import annotations

from ..plugins import Registry
from .base import EvalContext, Evaluation, Evaluator, grader_touches

EVALUATORS: Registry[Evaluator] = Registry("evaluator", Evaluator, __name__)

__all__ = ["EVALUATORS", "EvalContext", "Evaluation", "Evaluator", "grader_touches"]
