"""SWE-bench / SWE-Gym style task rows, read from JSONL and checked before any session starts.

A row: `instance_id`, `repo`, `base_commit`, `problem_statement`, `patch` (the reference fix),
`test_patch` (hidden tests), `FAIL_TO_PASS`, `PASS_TO_PASS` (JSON strings as in SWE-bench, or lists),
optional `repo_path` (a local copy of the repo at `base_commit`); other keys are kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import Field

from ..contracts import TaskSpec
from ..errors import ConfigError
from ..evaluators.row import EvalRow


class TaskRow(EvalRow):
    instance_id: str = Field(min_length=1)
    repo: str = Field(min_length=1)
    base_commit: str = Field(min_length=1)
    problem_statement: str = Field(min_length=1)
    patch: str = ""

    def task_spec(self, harness: dict[str, Any], evaluator: str = "tests", **task: Any) -> TaskSpec:
        """A TaskSpec for this row: the issue as the instruction, the row as `fields`."""
        return TaskSpec(
            task_id=task.pop("task_id", self.instance_id),
            instruction=self.problem_statement,
            fields=self.model_dump(mode="json"),
            harness=harness,
            runtime={"repo": self.repo_path} if self.repo_path else {},
            evaluator={"kind": evaluator, "config": task.pop("evaluator_config", {})},
            **task,
        )


def parse_row(fields: dict[str, Any], where: str = "row") -> TaskRow:
    if not isinstance(fields, dict):
        raise ConfigError(f"{where}: a JSON object, got {type(fields).__name__}")
    return TaskRow.parse(fields, where)


def load_jsonl(path: str | Path) -> list[TaskRow]:
    """Every row of a JSONL file; the first bad one stops it with `file:line: key: problem`."""
    rows, seen = [], set()
    with Path(path).open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{where}: not JSON: {exc}") from exc
            row = parse_row(data, where)
            if row.instance_id in seen:
                raise ConfigError(f"{where}: instance_id: {row.instance_id!r} appears twice")
            seen.add(row.instance_id)
            rows.append(row)
    return rows
