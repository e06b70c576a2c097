"""A task's `runtime` block: what every runtime kind reads (the working copy, the environment, set-up
steps, the network), and beside it the kind's own settings, which its `Settings` model validates
when the task is submitted, like a harness's (`docker`'s `image` and `cpus`, `local`'s `sandbox`).

    runtime: {kind: docker, image: python:3.11-slim, cpus: 2, repo: /data/repo, prepare: [pip install -e .]}
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ..config import Strict
from ..plugins import Registry, stored

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Step(Strict):
    """One set-up command, run with `sh -c` in the working directory: `prepare` steps before the agent,
    `eval_prepare` steps before grading. A step that fails (non-zero, or past its timeout) is tried
    again `retries` times, `backoff_s` apart (doubling); after the last try the session is masked."""

    command: str = Field(min_length=1, description="run with sh -c in the working directory")
    timeout_s: float = Field(600.0, gt=0, le=24 * 3600, strict=True, description="each try")
    retries: int = Field(0, ge=0, le=10, strict=True, description="more tries after a failed one")
    backoff_s: float = Field(
        2.0, ge=0, le=3600, strict=True, description="before the first retry; doubled for each next one"
    )
    env: dict[str, str] = Field(default_factory=dict, description="over the runtime's env, for this step")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"command": data} if isinstance(data, str) else data


class RuntimeSpec(BaseModel):
    """The fields every kind reads; every other key is the kind's own setting (`options`), validated by
    its `Settings` (`runtime.cpus: not a setting of runtime 'local'`). Specs read back from a store are
    not validated again (`plugins.STORED`)."""

    model_config = ConfigDict(extra="allow")
    kinds: ClassVar[Registry[Any]]  # runtimes.RUNTIMES, set by the room that imports this module

    kind: str = Field("local", description="local, docker, apptainer, image, or 'package.module:Class'")
    repo: str | None = Field(None, description="a folder copied as the session's working copy")
    commit: str | None = Field(
        None,
        description="the commit the working copy's git history is cut at (nothing after it is there; default "
        "HEAD): `repo`'s, or the image's own repository in `workdir`",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="every command's environment (set-up steps, the harness, grading): e.g. PATH of the image's "
        "own Python; the harness's own variables win",
    )
    prepare: list[Step] = Field(default_factory=list, description="set-up steps before the agent, in order")
    eval_prepare: list[Step] | None = Field(
        None, description="set-up steps of the fresh sandbox that grades the patch (null: the same as prepare)"
    )
    network: Literal["proxy", "none", "host"] = Field(
        "proxy", description="proxy: nothing but the proxy is reachable; none: nothing; host: no isolation"
    )

    @field_validator("kind")
    @classmethod
    def _known(cls, kind: str) -> str:
        return RuntimeSpec.kinds.check(kind)

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not _ENV_NAME.match(name):
                raise ValueError(f"runtime.env: {name!r} is not a variable name")
            if name == "HOME":
                raise ValueError("runtime.env: HOME is the session's own (the harness's HOME)")
        return env

    @property
    def options(self) -> dict[str, Any]:
        """The kind's own settings as given (nulls left to the kind's defaults)."""
        return {k: v for k, v in (self.model_extra or {}).items() if v is not None}

    def make(self, root: Path, session_id: str, proxy_url: str) -> Any:
        """The `Runtime` this block names, for one session under a node's `root` (`Registry.make`)."""
        return self.kinds.make(
            self.kind, self.options, spec=self, root=root, session_id=session_id, proxy_url=proxy_url
        )

    @property
    def limits(self) -> Any:
        """What one session may use of the node (`containment.Limits`: every kind's `limits` setting)."""
        cls = self.kinds[self.kind]
        return cls.parse_settings(self.options).limits

    @property
    def sandboxed(self) -> bool:
        """Whether its kind, with these settings, runs the session in a sandbox (`local` with sandbox
        false does not), as its class says (`Runtime.sandboxes`)."""
        cls = self.kinds[self.kind]
        return cls.sandboxes(cls.parse_settings(self.options))

    @model_validator(mode="after")
    def _settings_fit(self, info: ValidationInfo) -> RuntimeSpec:
        if not stored(info):
            RuntimeSpec.kinds.validate(self.kind, self.options)
        return self


def given(block: RuntimeSpec | dict[str, Any] | None) -> dict[str, Any]:
    """A runtime block's keys as set, for a dataset row to complete: defaults and nulls left out (a kind's
    `image: null` in conf/ means not set, so a row's own image or build takes its place)."""
    data = block.model_dump(exclude_defaults=True) if isinstance(block, RuntimeSpec) else dict(block or {})
    return {k: v for k, v in data.items() if v is not None}
