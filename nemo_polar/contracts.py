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


class RuntimeSpec(Strict):
    kind: str = Field("local", description="local, docker, apptainer, or 'package.module:Class'")
    image: str | None = Field(None, description="docker: an image name; apptainer: a .sif file or URI")
    repo: str | None = Field(None, description="a folder copied as the session's working copy")
    sandbox: bool = Field(True, description="local: bubblewrap where present (read-only host, private /tmp)")
    network: Literal["proxy", "none", "host"] = Field(
        "proxy", description="proxy: nothing but the proxy is reachable; none: nothing; host: no isolation"
    )
    cpus: float | None = Field(None, gt=0, description="docker/apptainer: CPU limit")
    memory: str | None = Field(
        None, pattern=r"^[0-9]+[bkmgBKMG]?$", description="docker/apptainer: memory limit, e.g. 2g or 512m"
    )

    @field_validator("kind")
    @classmethod
    def _known(cls, kind: str) -> str:
        return RUNTIMES.check(kind)

    @model_validator(mode="after")
    def _fits_kind(self) -> RuntimeSpec:
        """The built-in kinds' rules; a runtime of your own reads the fields it understands."""
        if self.kind in ("docker", "apptainer") and not self.image:
            raise ValueError(f"runtime.image is required for kind {self.kind!r}")
        if self.kind == "local":
            if self.image:
                raise ValueError("runtime.image needs kind docker or apptainer (local runs on this machine)")
            if self.cpus is not None or self.memory is not None:
                raise ValueError("runtime.cpus and runtime.memory need kind docker or apptainer (local has no limits)")
        elif self.kind in ("docker", "apptainer") and not self.sandbox:
            raise ValueError(f"runtime.sandbox=false only applies to kind local, not {self.kind!r}")
        return self


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
