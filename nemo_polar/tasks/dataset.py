"""SWE-bench / SWE-Gym style task rows, read from JSONL and checked before any session starts.

A row: `instance_id`, `repo`, `base_commit`, `problem_statement`, `patch` (the reference fix),
`test_patch` (hidden tests), `FAIL_TO_PASS`, `PASS_TO_PASS` (JSON strings as in SWE-bench, or lists),
optional `repo_path` (a local copy of the repo at `base_commit`); other keys are kept.

A row runs one of two ways (`TaskRow.runtime`):
- on this machine (`local`): its `repo_path` copied as the working copy;
- in its instance image (docker, apptainer, image): the image SWE-bench names for it (or the row's own
  `image`), the agent in the image's repository (`workdir`, SWE-bench's /testbed), the image's Python
  first on PATH, and set-up steps from the row: `git reset --hard <base_commit>` (or the row's own
  `prepare` / `eval_prepare`). The `swebench` evaluator then grades in a fresh sandbox of the same image.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import Field

from ..contracts import TaskSpec
from ..errors import ConfigError
from ..evaluators.row import EvalRow
from ..runtimes import RUNTIMES
from ..runtimes.spec import RuntimeSpec, given

# How SWE-bench's instance images are laid out (swebench.harness: the repository at /testbed, its
# environment the conda env `testbed`); SWE-Gym's images are built the same way.
SWE_WORKDIR = "/testbed"
SWE_PATH = (
    "/opt/miniconda3/envs/testbed/bin:/opt/miniconda3/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)


class TaskRow(EvalRow):
    instance_id: str = Field(min_length=1)
    repo: str = Field(min_length=1)
    base_commit: str = Field(min_length=1)
    problem_statement: str = Field(min_length=1)
    patch: str = ""

    def task_spec(
        self,
        harness: dict[str, Any],
        evaluator: str = "tests",
        runtime: RuntimeSpec | dict[str, Any] | None = None,
        **task: Any,
    ) -> TaskSpec:
        """A TaskSpec for this row: the issue as the instruction, the row as `fields`, the runtime as
        `runtime` (the default: local) says, completed from the row (`runtime()`)."""
        return TaskSpec(
            task_id=task.pop("task_id", self.instance_id),
            instruction=self.problem_statement,
            fields=self.model_dump(mode="json"),
            harness=harness,
            runtime=self.runtime(runtime),
            evaluator={"kind": evaluator, "config": task.pop("evaluator_config", {})},
            **task,
        )

    def runtime(self, base: RuntimeSpec | dict[str, Any] | None = None, namespace: str = "swebench") -> dict[str, Any]:
        """`base` (a runtime block) completed for this row: for `local`, its repo_path as the working copy;
        for an image kind, `image_runtime`'s keys under those `base` already sets."""
        spec = given(base)
        if RUNTIMES[spec.get("kind", "local")].in_image:
            return self.image_runtime(spec.get("kind", "docker"), namespace) | spec
        return spec | ({"repo": self.repo_path, "commit": self.base_commit} if self.repo_path else {})

    def image_runtime(self, kind: str = "docker", namespace: str = "swebench") -> dict[str, Any]:
        """The row's instance image, where the agent works in it (a copy of its `repo_path` when it has one and
        no image of its own), its environment and its set-up steps."""
        extra = self.model_extra or {}
        out: dict[str, Any] = {"workdir": extra.get("workdir") or SWE_WORKDIR, "commit": self.base_commit}
        if extra.get("image") or RUNTIMES[kind].pulls:  # an image folder cannot be named from the row
            out["image"] = image_of(self, namespace, kind)
        out["env"] = extra.get("env") or ({} if extra.get("image") else {"PATH": SWE_PATH})
        if self.repo_path and not extra.get("image"):  # a repository on this machine (the bundled tasks'): copied in
            out["repo"] = self.repo_path
        out["prepare"] = extra.get("prepare") or [f"git reset -q --hard {self.base_commit}"]
        if extra.get("eval_prepare") is not None:
            out["eval_prepare"] = extra["eval_prepare"]
        return out


def image_of(row: EvalRow, namespace: str = "swebench", kind: str = "docker") -> str:
    """The row's instance image (its own `image`, else SWE-bench's name for it) as runtime `kind` writes
    it (`Runtime.image_ref`: apptainer pulls a docker image by its docker:// name)."""
    image = (row.model_extra or {}).get("image")
    if not image:
        try:
            from swebench.task.checks import expected_image
        except ImportError as exc:
            raise ConfigError(
                "naming SWE-bench images needs the swebench extra (pip install nemo_polar[swebench])"
            ) from exc
        image = expected_image(row.instance_id, namespace)
    return RUNTIMES[kind].image_ref(image)


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
