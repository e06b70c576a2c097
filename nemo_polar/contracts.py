"""What the rollout server, the gateway nodes and their clients say to each other: tasks, sessions,
results, nodes. The layer every part shares (beside `records`): it imports no server.

A task is one prompt of the dataset run `num_samples` times (a GRPO group). Each run is a
session, which moves through these states; the last four are terminal and final:

    registered -> initializing -> ready -> running -> post_run -> building -> evaluating
               -> completed | error | timeout | cancelled

A task names its plug-ins (harness, runtime, builder, evaluator) from `nemo_polar.plugins`. Names are
checked when a spec is validated, and the harness's settings and the evaluator's config are validated
by the plug-in's own model, so a typo is refused when the task is submitted (400, naming the known
ones), never on a node after its sandbox was built. Specs read back from a store were checked when
they were submitted: validated with `STORED` as context, their plug-ins are not loaded again.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import InitErrorDetails

from .config import Strict
from .plugins import BUILDERS, EVALUATORS, HARNESSES, RUNTIMES

STORED = {"stored": True}  # validation context for specs read back from a store


def _stored(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("stored"))


def _validated_by(model: type[BaseModel], data: Any, title: str, *loc: str) -> None:
    """`data` checked by a plug-in's own model; its errors keep their paths (`harness.dialect`, ...)."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        details = [
            InitErrorDetails(type=e["type"], loc=(*loc, *e["loc"]), input=e["input"], ctx=e.get("ctx", {}))
            for e in exc.errors()
        ]
        raise ValidationError.from_exception_data(title, details) from None


class SessionState(StrEnum):
    REGISTERED = "registered"
    INITIALIZING = "initializing"
    READY = "ready"
    RUNNING = "running"
    POST_RUN = "post_run"
    BUILDING = "building"
    EVALUATING = "evaluating"
    COMPLETED = "completed"
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({SessionState.COMPLETED, SessionState.ERROR, SessionState.TIMEOUT, SessionState.CANCELLED})


class HarnessSpec(BaseModel):
    """Which harness, its step limit, and its own settings: every other key is the harness's, validated
    by its `Settings` model (e.g. pi's `dialect`, shell's `command`, everyone's `env`). A key set to
    null is left to the harness's default."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(description="a registered harness (nemo_polar.plugins.HARNESSES) or 'package.module:Class'")
    max_steps: int = Field(20, ge=1)

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        return HARNESSES.check(name)

    @property
    def options(self) -> dict[str, Any]:
        """The harness's own settings as given (nulls left out)."""
        return {k: v for k, v in (self.model_extra or {}).items() if v is not None}

    @model_validator(mode="after")
    def _settings_fit(self, info: ValidationInfo) -> HarnessSpec:
        if not _stored(info):
            _validated_by(HARNESSES[self.name].Settings, self.options, "HarnessSpec")
        return self


IMAGE_KINDS = ("docker", "apptainer", "image")  # the built-in kinds whose commands see an image, not this machine
RESERVED = "/polar"  # where the runtimes mount the session's folders, the toolchain and our scripts
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Step(Strict):
    """One set-up command, run with `sh -c` in the working directory: `prepare` steps before the agent,
    `eval_prepare` steps before grading. A step that fails (non-zero, or past its timeout) is tried
    again `retries` times, `backoff_s` apart (doubling); after the last try the session is masked."""

    command: str = Field(min_length=1, description="run with sh -c in the working directory")
    timeout_s: float = Field(600.0, gt=0, description="each try")
    retries: int = Field(0, ge=0, le=10, description="more tries after a failed one")
    backoff_s: float = Field(2.0, ge=0, description="before the first retry; doubled for each next one")
    env: dict[str, str] = Field(default_factory=dict, description="over the runtime's env, for this step")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"command": data} if isinstance(data, str) else data


class RuntimeSpec(Strict):
    kind: str = Field("local", description="local, docker, apptainer, image, or 'package.module:Class'")
    image: str | None = Field(
        None,
        description="docker: an image name; apptainer: a .sif file or URI (docker://...); image: a root "
        "filesystem folder, or several joined by ':' (the first on top)",
    )
    repo: str | None = Field(None, description="a folder copied as the session's working copy")
    workdir: str | None = Field(
        None,
        description="docker/apptainer/image: where the agent works, e.g. /testbed: the image's own folder, or "
        "`repo` copied there (default /polar/work)",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="every command's environment (set-up steps, the harness, grading): e.g. PATH of the image's "
        "own Python; the harness's own variables win",
    )
    volumes: list[str] = Field(
        default_factory=list,
        description="docker/apptainer/image: more binds, HOST:INSIDE[:ro|rw] (read-only by default)",
    )
    prepare: list[Step] = Field(default_factory=list, description="set-up steps before the agent, in order")
    eval_prepare: list[Step] | None = Field(
        None, description="set-up steps of the fresh sandbox that grades the patch (null: the same as prepare)"
    )
    sandbox: bool = Field(True, description="local: bubblewrap where present (read-only host, private /tmp)")
    network: Literal["proxy", "none", "host"] = Field(
        "proxy", description="proxy: nothing but the proxy is reachable; none: nothing; host: no isolation"
    )
    cpus: float | None = Field(None, gt=0, description="docker/apptainer: CPU limit")
    memory: str | None = Field(
        None, pattern=r"^[0-9]+[bkmgBKMG]?$", description="docker/apptainer: memory limit, e.g. 2g or 512m"
    )
    gpus: int = Field(0, ge=0, description="docker: that many GPUs (device requests); apptainer: --nv when > 0")

    @field_validator("kind")
    @classmethod
    def _known(cls, kind: str) -> str:
        return RUNTIMES.check(kind)

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, workdir: str | None) -> str | None:
        if workdir is not None:
            _inside_path(workdir, "runtime.workdir")
        return workdir

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not _ENV_NAME.match(name):
                raise ValueError(f"runtime.env: {name!r} is not a variable name")
            if name == "HOME":
                raise ValueError("runtime.env: HOME is the session's own (the harness's HOME)")
        return env

    @field_validator("volumes")
    @classmethod
    def _volumes(cls, volumes: list[str]) -> list[str]:
        for volume in volumes:
            parse_volume(volume)
        return volumes

    @property
    def binds(self) -> list[tuple[str, str, bool]]:
        """`volumes` as (host, inside, writable)."""
        return [parse_volume(v) for v in self.volumes]

    @model_validator(mode="after")
    def _fits_kind(self) -> RuntimeSpec:
        """The built-in kinds' rules; a runtime of your own reads the fields it understands."""
        if self.kind in IMAGE_KINDS and not self.image:
            raise ValueError(f"runtime.image is required for kind {self.kind!r}")
        if self.kind == "local":
            if self.image:
                raise ValueError("runtime.image needs kind docker, apptainer or image (local runs on this machine)")
            for key in ("workdir", "volumes", "cpus", "memory", "gpus"):
                if getattr(self, key):
                    raise ValueError(
                        f"runtime.{key} needs kind docker, apptainer or image (local works in a copy on this machine)"
                    )
        elif self.kind in IMAGE_KINDS and not self.sandbox:
            raise ValueError(f"runtime.sandbox=false only applies to kind local, not {self.kind!r}")
        if self.kind == "image":
            for key in ("cpus", "memory", "gpus"):
                if getattr(self, key):
                    raise ValueError(f"runtime.{key} needs kind docker or apptainer (image has no resource limits)")
            if not all(layer.startswith("/") for layer in self.image.split(":")):
                raise ValueError("runtime.image for kind image: absolute folders joined by ':'")
        return self


def _inside_path(path: str, what: str) -> None:
    if not path.startswith("/") or path.rstrip("/") == "" or ".." in path.split("/"):
        raise ValueError(f"{what}: {path!r} must be an absolute path inside, not / and without ..")
    if path.rstrip("/") == RESERVED or path.startswith(RESERVED + "/"):
        raise ValueError(f"{what}: {path!r} is under {RESERVED}, where the runtimes mount their own folders")


def parse_volume(volume: str) -> tuple[str, str, bool]:
    """`HOST:INSIDE[:ro|rw]` as (host, inside, writable); read-only unless `:rw`."""
    parts = volume.split(":")
    if len(parts) == 2:
        parts.append("ro")
    if len(parts) != 3 or parts[2] not in ("ro", "rw") or not parts[0].startswith("/"):
        raise ValueError(f"runtime.volumes: {volume!r} is not HOST:INSIDE[:ro|rw] with absolute paths")
    _inside_path(parts[1], "runtime.volumes")
    return parts[0], parts[1], parts[2] == "rw"


class EvaluatorSpec(Strict):
    kind: str = Field("session_completed", description="a registered evaluator or 'package.module:Class'")
    config: dict[str, Any] = Field(default_factory=dict, description="the evaluator's own `Config`")

    @field_validator("kind")
    @classmethod
    def _known(cls, kind: str) -> str:
        return EVALUATORS.check(kind)

    @model_validator(mode="after")
    def _config_fits(self, info: ValidationInfo) -> EvaluatorSpec:
        if not _stored(info):
            _validated_by(EVALUATORS[self.kind].Config, self.config, "EvaluatorSpec", "config")
        return self


class TaskSpec(Strict):
    task_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}$",
        description="given or minted; submitting an id twice is a conflict; letters, digits and ._:@+- (it is a path)",
    )
    instruction: str = Field(min_length=1)
    fields: dict[str, Any] = Field(default_factory=dict, description="the dataset row")
    harness: HarnessSpec
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    builder: str = Field("prefix_tree", description="per_request, prefix_tree, or 'package.module:Class'")
    evaluator: EvaluatorSpec = Field(default_factory=EvaluatorSpec)
    num_samples: int = Field(1, ge=1, le=4096)
    priority: int = Field(0, ge=0, le=100, description="higher enters INIT first; running ones are never preempted")
    session_timeout_s: float = Field(1800, gt=0, description="from the start of INIT to the result")
    agent_timeout_s: float = Field(1200, gt=0, description="the harness's own run; time in READY does not count")
    early_stop_k: int | None = Field(None, ge=1, description="cancel stragglers once k sessions are done")
    group_id: str | None = Field(
        None,
        description="the GRPO group when its samples come as one task each (NeMo Gym's /run): early stop and "
        "the choice of inference server then count the whole group",
    )
    callback_url: str | None = Field(None, description="POSTed the task result when every session is final")
    upstream_url: str | None = Field(
        None, description="this task's inference server instead of the node's (NeMo-RL's vLLM, known at run time)"
    )
    upstream_model: str | None = Field(
        None, description="the name that server serves the policy under (NeMo-RL: policy.model_name)"
    )
    max_output_tokens: int | None = Field(
        None, ge=1, description="cap on each model call's sampled tokens (NeMo-RL writes it into every row)"
    )
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("builder")
    @classmethod
    def _known_builder(cls, builder: str) -> str:
        return BUILDERS.check(builder)


class Timing(BaseModel):
    queued_s: float = 0.0
    init_s: float = 0.0
    ready_wait_s: float = 0.0
    run_s: float = 0.0
    postrun_s: float = 0.0


class SessionResult(BaseModel):
    """A session's outcome, sent by its gateway node; the rollout server keeps the first it gets."""

    session_id: str
    task_id: str
    status: SessionState
    reward: float | None = None
    reward_components: dict[str, float] = Field(default_factory=dict)
    masked: bool = Field(False, description="an infrastructure failure: exclude from training, do not score 0")
    traces_path: str | None = None
    proxy_session_id: str | None = Field(
        None, description="the proxy session holding its calls (the node's GET /admin/sessions/{id}/completions)"
    )
    stats: dict[str, Any] = Field(default_factory=dict)
    rollup: dict[str, Any] | None = Field(
        None, description="what its calls cost (nemo_polar/rollup.py: calls, tokens, model and tools time)"
    )
    timing: Timing = Timing()
    node_id: str | None = None
    error: str | None = None


class DispatchRequest(BaseModel):
    session_id: str
    task: TaskSpec
    callback_url: str
    sample_index: int = 0


class NodeMetrics(BaseModel):
    init_queue: int = 0
    init_inflight: int = 0
    ready: int = 0
    run_inflight: int = 0
    postrun_queue: int = 0
    postrun_inflight: int = 0
    recording: bool = Field(True, description="its proxy records calls; a node that cannot gets no sessions")


class NodeCapacity(Strict):
    init: int = Field(4, ge=1)
    run: int = Field(8, ge=1)
    postrun: int = Field(4, ge=1)
    ready: int = Field(8, ge=0, description="the READY buffer target")


class NodeRegistration(Strict):
    node_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    url: str
    capacity: NodeCapacity = NodeCapacity()
    heartbeat_s: float = Field(5.0, gt=0)
    token: str | None = Field(
        None, description="the x-polar-control-token the node's own routes want (its sandboxes share its port)"
    )
