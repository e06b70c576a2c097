"""What the rollout server, the gateway nodes and their clients say to each other: tasks, sessions,
results, nodes. The layer every part shares (beside `records`): it imports no server.

A task is one prompt of the dataset run `num_samples` times (a GRPO group). Each run is a
session, which moves through the states of `states.py`.

A task names its plug-ins (harness, runtime, builder, evaluator) from their rooms' registries. Names
are checked when a spec is validated, and each plug-in's options (the harness's settings, the runtime
kind's, the evaluator's config) by its own `Settings` model, so a typo is refused when the task is
submitted (400, naming the known ones), never on a node after its sandbox was built. Specs read back
from a store were checked when they were submitted: validated with `plugins.STORED` as context, their
plug-ins are not loaded again.

A task's secrets (every `env` value, and the values of the keys it names in `secret_keys`) travel to the node
that runs it as given, and are masked wherever a task is shown (`redaction.Secrets`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from .config import Strict
from .evaluators import EVALUATORS
from .harnesses import HARNESSES
from .plugins import stored
from .redaction import Secrets
from .runtimes.spec import RuntimeSpec
from .states import SessionState
from .traces import BUILDERS

MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week: longer is a typo (1e308), not a session


class HarnessSpec(BaseModel):
    """Which harness, its step limit, and its own settings: every other key is the harness's, validated
    by its `Settings` model (e.g. pi's `dialect`, shell's `command`, everyone's `env`). A key set to
    null is left to the harness's default."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(description="a registered harness (nemo_polar.harnesses.HARNESSES) or 'package.module:Class'")
    max_steps: int = Field(
        20,
        ge=1,
        le=100_000,
        strict=True,
        description="the harness's step limit, passed on at its launch (e.g. claude_code's --max-turns); a harness "
        "that does not stop itself there is held by the proxy to that many model calls unless `budget.calls` is set",
    )

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
        if not stored(info):
            HARNESSES.validate(self.name, self.options)
        return self


class SessionBudget(Strict):
    """What one session may spend at the model: once spent, every further call is answered with a terminal error in
    the harness's dialect, the harness is stopped, and the session ends `budget_spent`: masked, or graded as it
    stands (`on_spent: score`). Never left to run to its timeout."""

    calls: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        strict=True,
        description="model calls, side calls included (null: the harness's "
        "max_steps for a harness that does not stop itself there, else none)",
    )
    tokens: int | None = Field(None, ge=1, le=1 << 32, strict=True, description="sampled tokens, over every call")
    on_spent: Literal["mask", "score"] = Field("mask", description="mask the session, or grade what the agent left")


class EvaluatorSpec(Strict):
    kind: str = Field("session_completed", description="a registered evaluator or 'package.module:Class'")
    config: dict[str, Any] = Field(default_factory=dict, description="the evaluator's own `Settings`")

    @field_validator("kind")
    @classmethod
    def _known(cls, kind: str) -> str:
        return EVALUATORS.check(kind)

    @model_validator(mode="after")
    def _config_fits(self, info: ValidationInfo) -> EvaluatorSpec:
        if not stored(info):
            EVALUATORS.validate(self.kind, self.config, "config")
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
    # numbers are numbers: "2" or true is not taken for 2 or 1 (strict), and every one is bounded
    num_samples: int = Field(1, ge=1, le=4096, strict=True)
    priority: int = Field(
        0, ge=0, le=100, strict=True, description="higher enters INIT first; running ones are never preempted"
    )
    session_timeout_s: float = Field(
        1800, gt=0, le=MAX_TIMEOUT_S, strict=True, description="from the start of INIT to the result"
    )
    agent_timeout_s: float = Field(
        1200, gt=0, le=MAX_TIMEOUT_S, strict=True, description="the harness's own run; time in READY does not count"
    )
    early_stop_k: int | None = Field(
        None, ge=1, strict=True, description="cancel stragglers once k sessions are done (at most num_samples)"
    )
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
    budget: SessionBudget = Field(default_factory=SessionBudget, description="what one session may spend")
    max_output_tokens: int | None = Field(
        None,
        ge=1,
        le=1 << 24,
        strict=True,
        description="cap on each model call's sampled tokens (NeMo-RL writes it into every row)",
    )
    metadata: dict[str, Any] = Field(default_factory=dict)
    secret_keys: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list,
        max_length=256,
        description="more keys whose values are never shown (read routes, the task-result callback, polar view, "
        "log lines), at any depth of the spec: a dataset field, a harness or evaluator setting; every `env` "
        "value (the harness's, the runtime's, a step's) is never shown either (nemo_polar/redaction.py)",
    )

    @field_validator("builder")
    @classmethod
    def _known_builder(cls, builder: str) -> str:
        return BUILDERS.check(builder)

    @field_validator("callback_url", "upstream_url")
    @classmethod
    def _url(cls, url: str | None, info: ValidationInfo) -> str | None:
        return None if url is None else http_url(url, info.field_name)

    @model_validator(mode="after")
    def _early_stop_fits(self) -> TaskSpec:
        # a task of a Gym group has one sample; its k counts the whole group, which only the server sees
        if self.early_stop_k is not None and self.group_id is None and self.early_stop_k > self.num_samples:
            raise ValueError(f"early_stop_k ({self.early_stop_k}) is more than num_samples ({self.num_samples})")
        return self

    @property
    def secrets(self) -> Secrets:
        """What is never shown of this task (`redaction.Secrets`)."""
        return Secrets.of(self.model_dump(mode="json"))

    @property
    def call_budget(self) -> int | None:
        """The session's budget of model calls: `budget.calls`, else the harness's `max_steps` where the harness
        does not stop itself there (the proxy enforces it), else none."""
        if self.budget.calls is not None:
            return self.budget.calls
        return None if HARNESSES[self.harness.name].stops_at_max_steps else self.harness.max_steps


def http_url(url: str, what: str) -> str:
    """`url` when it is an http(s) URL with a host (and a port, if any, that is a port)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError as exc:
        raise ValueError(f"{what}: {url!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what}: {url!r} is not an http(s) URL with a host")
    return url


class Timing(BaseModel):
    queued_s: float = 0.0
    init_s: float = 0.0
    ready_wait_s: float = 0.0
    run_s: float = 0.0
    postrun_s: float = 0.0


class FailureKind(StrEnum):
    """Why a session was masked, named where it happened; the values are NeMo Gym's failure vocabulary
    (`nemo_gym/failure_kinds.py`), so a Gym result carries the kind as it is (`env/gym.py`)."""

    AGENT_RUN_ERROR = "agent_run_error"  # the agent's run broke or never happened (gateway: RUN, its budget or limit)
    VERIFIER_ERROR = "verifier_error"  # the evaluator could not judge (gateway: POST-RUN's evaluation)
    SESSION_LOST = "session_lost"  # its node was lost or the rollout server restarted (rollout server)
    AGENT_TIMEOUT = "agent_timeout"  # past session_timeout_s (gateway, or the rollout server's backstop)
    CANCELLED = "cancelled"  # the task was cancelled, or stopped early (rollout server, gateway)
    TRANSPORT_UNREACHABLE = "transport_unreachable"  # no session: the rollout server gave no answer (Gym agent)
    AGENT_REQUEST_FAILED = "agent_request_failed"  # no session: the row or the task was refused (Gym agent)


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
    failure_kind: FailureKind | None = Field(
        None, description="why it is masked, set where that happened (`error` says it in words, for people)"
    )


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
    init: int = Field(4, ge=1, description="sessions setting up at once (sandbox, working copy, harness install)")
    run: int = Field(8, ge=1, description="harnesses running at once: the node's concurrent sessions at the model")
    postrun: int = Field(4, ge=1, description="sessions at once in POST-RUN: grading, building traces")
    ready: int = Field(8, ge=0, description="the READY buffer target")


class NodeRegistration(Strict):
    node_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    url: str
    capacity: NodeCapacity = NodeCapacity()
    heartbeat_s: float = Field(5.0, gt=0)
    token: str | None = Field(
        None, description="the x-polar-control-token the node's own routes want (its sandboxes share its port)"
    )
