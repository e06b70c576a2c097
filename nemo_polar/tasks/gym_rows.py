"""`polar data swe`: SWE-bench / SWE-Gym rows, as users download them, into the NeMo Gym rows a recipe names.

Input: a JSONL or parquet file of rows (SWE-bench's `FAIL_TO_PASS` as JSON strings, SWE-Gym's as lists), each
checked as a task row. Output: one Gym row per line, for the `polar_agent`: the issue as the user message,
the row's own fields kept at the top level (the evaluator reads them), and a `polar` block naming the task
and its instance image as SWE-bench names it (`swebench.task.checks.expected_image`, needs the `swebench`
extra), or the row's own `image` when it has one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .dataset import TaskRow, parse_row


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


def image_of(row: TaskRow, namespace: str, engine: str) -> str:
    """The row's instance image; apptainer pulls a docker image by its `docker://` name."""
    image = (row.model_extra or {}).get("image")
    if not image:
        try:
            from swebench.task.checks import expected_image
        except ImportError as exc:
            raise ConfigError(
                "naming SWE-bench images needs the swebench extra (pip install nemo_polar[swebench])"
            ) from exc
        image = expected_image(row.instance_id, namespace)
    return f"docker://{image}" if engine == "apptainer" and "://" not in image else image


def gym_rows(
    rows: list[TaskRow], *, namespace: str = "swebench", engine: str = "apptainer"
) -> Iterator[dict[str, Any]]:
    for row in rows:
        fields = row.model_dump(mode="json", exclude_none=True)
        yield {
            "responses_create_params": {"input": [{"role": "user", "content": row.problem_statement}]},
            "agent_ref": {"type": "responses_api_agents", "name": "polar_agent"},
            "polar": {"task_id": row.instance_id, "runtime": {"image": image_of(row, namespace, engine)}},
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
