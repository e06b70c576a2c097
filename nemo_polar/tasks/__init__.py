"""Tasks: the bundled CPU task set, SWE-bench style rows, and their checks."""

from __future__ import annotations

from .bundled import TASKS
from .model import BundledTask

__all__ = ["TASKS", "BundledTask"]
