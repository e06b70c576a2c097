"""The dataset-row fields the test-running evaluators read (SWE-bench / SWE-Gym names).

SWE-bench ships `FAIL_TO_PASS` / `PASS_TO_PASS` as JSON strings, SWE-Gym and local files as lists:
both are accepted. Other fields of the row are kept and ignored here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import ConfigError, problems


class EvalRow(BaseModel):
    model_config = ConfigDict(extra="allow")

    instance_id: str = ""
    repo: str = ""
    base_commit: str | None = Field(None, description="the commit the agent started from (default: HEAD)")
    test_patch: str = Field("", description="the hidden tests, applied after the agent's patch")
    FAIL_TO_PASS: list[str] = Field(min_length=1, description="tests the fix must make pass")
    PASS_TO_PASS: list[str] = Field(default_factory=list, description="tests that must keep passing")
    test_cmd: str | list[str] | None = Field(None, description="the test command; `{tests}` stands for the ids")
    repo_path: str | None = Field(None, description="a local copy of the task repo at base_commit")

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"a JSON list of test ids, or a list (got an unreadable string: {exc})") from exc
        if isinstance(value, list) and not all(isinstance(v, str) and v for v in value):
            raise ValueError("every test id must be a non-empty string")
        return value

    @classmethod
    def parse(cls, fields: dict[str, Any], where: str = "task fields") -> EvalRow:
        try:
            return cls.model_validate(fields)
        except ValidationError as exc:
            raise ConfigError(f"{where}: " + "; ".join(problems(exc, whole="row"))) from exc

    def task_repo(self, given: str | Path | None) -> Path | None:
        """The pristine task repo on this machine: the runtime's `repo` (`given`), else the row's `repo_path`."""
        return Path(given) if given else Path(self.repo_path) if self.repo_path else None

    @property
    def tests(self) -> list[str]:
        return list(dict.fromkeys(self.FAIL_TO_PASS + self.PASS_TO_PASS))
