"""`polar data swe`: SWE-bench / SWE-Gym rows, as users download them, into the NeMo Gym rows a recipe names.

Input: a JSONL or parquet file of rows (SWE-bench's `FAIL_TO_PASS` as JSON strings, SWE-Gym's as lists), each
checked as a task row. Output: one Gym row per line, for the `polar_agent`: the issue as the user message,
the row's own fields kept at the top level (the evaluator reads them), and a `polar` block naming the task
and its runtime (`TaskRow.image_runtime`): the instance image as SWE-bench names it
(`swebench.task.checks.expected_image`, needs the `swebench` extra) or the row's own `image`, the working
directory where the image keeps the repository (/testbed), the image's Python first on PATH, and the set-up
step `git reset --hard <base_commit>`. The recipe's runtime block gives the kind and the limits.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .dataset import TaskRow, image_of, parse_row

__all__ = ["gym_rows", "image_of", "read_rows", "write"]


def read_rows(path: str | Path) -> list[TaskRow]:
    """Every row of a JSONL or parquet file, checked; the first bad one names its file, row and key."""
    path = Path(path)
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise ConfigError(f"{path}: reading parquet needs pyarrow (pip install nemo_polar[swebench])") from exc
        records = pq.read_table(path).to_pylist()
        return [parse_row(r, f"{path}:row {n}") for n, r in enumerate(records, 1)]
    from .dataset import load_jsonl

    return load_jsonl(path)


def gym_rows(
    rows: list[TaskRow], *, namespace: str = "swebench", engine: str = "apptainer"
) -> Iterator[dict[str, Any]]:
    for row in rows:
        fields = row.model_dump(mode="json", exclude_none=True)
        yield {
            "responses_create_params": {"input": [{"role": "user", "content": row.problem_statement}]},
            "agent_ref": {"type": "responses_api_agents", "name": "polar_agent"},
            "polar": {"task_id": row.instance_id, "runtime": row.image_runtime(engine, namespace)},
            **fields,
        }


def write(source: str | Path, out: str | Path, *, namespace: str = "swebench", engine: str = "apptainer") -> int:
    """Convert `source` into Gym JSONL at `out`; the number of rows written."""
    rows = read_rows(source)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r, ensure_ascii=False) for r in gym_rows(rows, namespace=namespace, engine=engine)]
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return len(lines)
