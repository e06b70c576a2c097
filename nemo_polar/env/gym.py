"""One NeMo Gym rollout = one nemo_polar session: the row in, the `/run` result out.

What the Gym servers in `gym/` delegate to (`responses_api_agents/polar_agent`,
`resources_servers/polar`). No nemo_gym import here: this module runs in the project's Python 3.11
environment too, and its results are plain dicts shaped as Gym 0.7.0's `BaseVerifyResponse`.

Row -> task (`task_from_row`)
    The instruction is the row's `polar.instruction`, else the text of the last user message of
    `responses_create_params.input`. `polar` (optional) overrides the agent's defaults: harness,
    runtime, builder, evaluator, fields, timeouts, task_id (a prefix: every rollout gets its own
    id). `fields` defaults to the row without Gym's keys. `num_samples` is always 1: Gym and
    NeMo-RL repeat the row themselves for the GRPO group.

Session -> `/run` result (`rollout_result`)
    The primary chain becomes `response.output` (token fields on each trained call's last item,
    built by `nemo_polar.traces.export`; see `primary_chain` for the policy), and every chain, each
    sampled span owned by one, goes in `training_traces` (Gym's envelope: `traces.export`). The
    reward is the evaluator's, from the session result.

Masking (`verdict`)
    An infrastructure failure (the session did not complete, the node lost it, the evaluator could
    not judge, no trainable tokens, the rollout server unreachable) is masked, never scored 0:
    main reads), `failure_kind` from Gym's vocabulary (the session result's own, set where the failure
    happened: `contracts.FailureKind`), `reward: 0.0` because Gym requires a float.
    Its output is the one-token placeholder of `export.gym_masked_response`, since NeMo-RL rejects
    a rollout without generation data before it reads the mask; the placeholder's first prompt
    groups with no real task, so it stays out of the real group's baseline.
"""

from __future__ import annotations

import logging
import math
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

from ..contracts import FailureKind, TaskSpec
from ..errors import ControlError, ControlUnreachable
from ..evaluators.base import GRADER_TOUCHES, grader_touches
from ..server.client import RolloutAPI
from ..states import SessionState
from ..traces.export import gym_masked_response, gym_response, read_jsonl, training_traces
from ..traces.models import Trace

log = logging.getLogger("nemo_polar.env.gym")

# Row keys that are Gym's, not the task's: kept out of the task's `fields`.
GYM_ROW_KEYS = ("responses_create_params", "agent_ref", "polar", "_ng_rollout_id")
# `response.metadata` keys (strings only, as the Responses API allows) linking a rollout to its session.
META_TASK, META_SESSION = "polar_task_id", "polar_session_id"


# --- row -> task --------------------------------------------------------------------------------
def instruction_of(row: dict[str, Any]) -> str:
    """`polar.instruction`, else the text of the last user message of `responses_create_params.input`."""
    polar = row.get("polar") or {}
    if polar.get("instruction"):
        return str(polar["instruction"])
    items = (row.get("responses_create_params") or {}).get("input") or []
    if isinstance(items, str):
        return items
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role", "user") == "user" and item.get("type", "message") == "message":
            content = item.get("content")
            if isinstance(content, str):
                return content
            parts = [p.get("text", "") for p in content or [] if isinstance(p, dict)]
            if any(parts):
                return "\n".join(p for p in parts if p)
    raise ValueError("the row has no instruction: no polar.instruction and no user message in responses_create_params")


def pick_upstream(urls: list[str], task_id: str) -> str | None:
    """One of the policy's inference servers for this task: the same for every call of the session
    (its prefix cache stays warm), spread over the servers by the task id."""
    if not urls:
        return None
    return urls[zlib.crc32(task_id.encode()) % len(urls)]


def task_from_row(row: dict[str, Any], defaults: dict[str, Any]) -> TaskSpec:
    """The one-sample task for a Gym row; `defaults` are the agent config's task keys."""
    polar = dict(row.get("polar") or {})
    spec = {k: v for k, v in defaults.items() if v is not None}
    for key in ("harness", "runtime", "evaluator"):  # merged key by key: a row may set only runtime.repo
        if isinstance(polar.get(key), dict):
            mine, base = polar.pop(key), spec.get(key) or {}
            if key == "evaluator" and mine.get("kind", base.get("kind")) != base.get("kind"):
                base = {}  # another evaluator than the defaults': their config is their evaluator's
            spec[key] = {**base, **mine}
    prefix = polar.pop("task_id", None) or "gym"
    polar.pop("instruction", None)
    spec.update(polar)
    spec.setdefault("fields", {k: v for k, v in row.items() if k not in GYM_ROW_KEYS and not k.startswith("_ng_")})
    params = row.get("responses_create_params") or {}
    if params.get("max_output_tokens") is not None:  # NeMo-RL writes min(row, max_new_tokens) into every row
        spec.setdefault("max_output_tokens", int(params["max_output_tokens"]))
    spec["metadata"] = {
        **(spec.get("metadata") or {}),
        "gym": {k: row[k] for k in ("_ng_task_index", "_ng_rollout_index", "_ng_rollout_id") if k in row},
        # what NeMo-RL asked for; the node's proxy pins its own pair (backend.sampling), see the agent
        "sampling": {k: params[k] for k in ("temperature", "top_p") if params.get(k) is not None},
    }
    spec.update(task_id=f"{prefix}-{uuid.uuid4().hex[:12]}", instruction=instruction_of(row), num_samples=1)
    return TaskSpec.model_validate(spec)


class Groups:
    """The GRPO group of each `/run`. NeMo Gym and NeMo-RL repeat a row once per sample and call `/run`
    for each; the repeats of one row share `_ng_task_index`. The samples of a row seen so far form its
    open group until `size` of them arrived; the next one opens a new group (the row in a later step).
    Without a size or a task index there is no group: each sample stands alone, as before."""

    def __init__(self, size: int | None):
        self.size = size
        self._open: dict[str, tuple[str, int]] = {}

    def of(self, row: dict[str, Any]) -> str | None:
        index = row.get("_ng_task_index")
        if not self.size or index is None:
            return None
        group, seen = self._open.get(str(index), ("", self.size))
        if seen >= self.size:
            group, seen = f"group-{uuid.uuid4().hex[:12]}", 0
        self._open[str(index)] = (group, seen + 1)
        return group


# --- the rollout server: the control plane's one client (nemo_polar.server.client) -----------------
RolloutClient = RolloutAPI  # submit, task, wait (polls GET /tasks/{id}), cancel, close
RolloutUnavailable = ControlError  # unreachable, refused the task, or no result in time


# --- session result -> reward, mask ----------------------------------------------------------------
@dataclass
class Verdict:
    reward: float
    mask_sample: bool = False
    failure_kind: str | None = None
    failure_reason: str | None = None
    reward_components: dict[str, float] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        """The top-level `/run` fields: Gym's, NeMo-RL's `instance_config`, components when several."""
        out: dict[str, Any] = {
            "reward": self.reward,
            "mask_sample": self.mask_sample,
            "failure_kind": self.failure_kind,
            "failure_reason": self.failure_reason,
            "instance_config": {"mask_sample": self.mask_sample},
        }
        # Only a reward of several parts is sent as parts: NeMo-RL's reward penalties zero `reward` and
        # leave the parts, then its own check that they sum to `reward` fails the whole batch.
        if len(self.reward_components) > 1 and not self.mask_sample:
            out["reward_components"] = dict(self.reward_components)
        return out


def masked(kind: str, reason: str) -> Verdict:
    return Verdict(0.0, True, str(kind), reason[:2000])


def timeout_policy(judged: Verdict, timeout_reward: str) -> Verdict:
    """An agent that ran out of time: masked (`mask`, the default: a timeout says as much about the
    machine as about the policy) or a reward of 0 that trains (`zero`, as the reference system does)."""
    if timeout_reward == "zero" and judged.mask_sample and judged.failure_kind == "agent_timeout":
        return Verdict(0.0, failure_kind="agent_timeout", failure_reason=judged.failure_reason)
    return judged


def verdict(session: dict[str, Any]) -> Verdict:
    """The reward of a final session (GET /tasks/{id} shape), or why it is masked."""
    result = session.get("result") or {}
    state = SessionState(result.get("status") or session.get("state"))
    error = str(result.get("error") or "")
    # what the result says failed; a result without one (a node of an older version) failed in its run
    kind = FailureKind(result["failure_kind"]) if result.get("failure_kind") else FailureKind.AGENT_RUN_ERROR
    if state is SessionState.TIMEOUT:
        return masked(FailureKind.AGENT_TIMEOUT, error or "session timed out")
    if state is SessionState.CANCELLED:
        return masked(FailureKind.CANCELLED, error or "session cancelled")
    if state is not SessionState.COMPLETED:
        return masked(kind, error or f"session ended in {state.value}")
    if result.get("masked") or result.get("reward") is None:
        return masked(kind, error or "the session result is masked")
    reward = float(result["reward"])
    if not math.isfinite(reward):
        return masked("verifier_error", f"reward is {reward}")
    components = {k: float(v) for k, v in (result.get("reward_components") or {}).items()}
    if components and not math.isclose(sum(components.values()), reward, rel_tol=1e-5, abs_tol=1e-6):
        return masked("verifier_error", f"reward_components {components} do not sum to reward {reward}")
    return Verdict(reward, reward_components=components)


# --- traces -> output -----------------------------------------------------------------------------
def _root_seq(trace: Trace) -> int:
    seq = trace.metadata.get("seq") or [0]
    return int(seq[0])


def _last_seq(trace: Trace) -> int:
    seq = trace.metadata.get("seq") or [0]
    return int(seq[-1])


def primary_chain(traces: list[Trace]) -> int | None:
    """The index of the chain that goes into `response.output`; None when no chain has trained tokens.

    Policy: never a side call (a session title, a topic check: `metadata["side_call"]`, named by the harness).
    Among the agent's chains rooted at its first model call (the task's own first prompt, which NeMo-RL uses as the
    GRPO grouping key: a chain rooted later, e.g. after a compaction or in a sub-agent, starts from a prompt the
    other samples of the task do not share), the one with the most trained tokens; ties go to the chain whose last
    call came latest (the continuation the harness kept). Without trained tokens in those, none: the rollout is
    masked. Every chain, this one included, is in the result's `training_traces`, so nothing is dropped.
    """
    agent = [i for i, t in enumerate(traces) if not t.metadata.get("side_call")]
    trained = [i for i in agent if traces[i].trained_tokens > 0]
    if not trained:
        return None
    first = min(_root_seq(traces[i]) for i in agent)
    rooted = [i for i in trained if _root_seq(traces[i]) == first]
    if not rooted:
        return None
    return max(rooted, key=lambda i: (traces[i].trained_tokens, _last_seq(traces[i]), -i))


@dataclass
class RolloutOutput:
    response: dict[str, Any]
    polar: dict[str, Any]  # the `polar` block of the result: ids, chains, paths
    metrics: dict[str, float | int]  # numeric top-level fields (NeMo-RL logs them per agent)
    problem: Verdict | None = None  # set when the output itself forces a mask
    training_traces: dict[str, Any] | None = None  # every chain, Gym's envelope (traces/export.py)


def rollout_output(
    session: dict[str, Any], *, task_id: str, model: str = "nemo_polar", builder: str = "prefix_tree"
) -> RolloutOutput:
    """`response` (primary chain, or the masked placeholder) and every chain (`training_traces`)."""
    result = session.get("result") or {}
    session_id = session.get("session_id", "")
    polar: dict[str, Any] = {"task_id": task_id, "session_id": session_id, "traces_path": result.get("traces_path")}
    traces, problem = _load_traces(result.get("traces_path"))
    primary = primary_chain(traces) if traces else None
    if problem is None and primary is None:
        problem = masked("polar:no_generation", f"session {session_id}: no chain rooted at its first call was trained")
    others = [i for i in range(len(traces)) if i != primary]
    polar.update(chains=len(traces), primary_chain=primary, other_chains=others)
    envelope = None
    if traces:
        try:
            envelope = training_traces(traces, session_id, builder)
        except ValueError as exc:
            problem = problem or masked("polar:traces_invalid", str(exc))
    if primary is None:
        response = gym_masked_response(model, response_id=f"resp_{session_id or task_id}")
    else:
        response = gym_response(traces[primary], None, model, response_id=f"resp_{session_id}")
    response["metadata"] = {META_TASK: task_id, META_SESSION: session_id}
    metrics = {
        "polar_chains": len(traces),
        "polar_trained_tokens": traces[primary].trained_tokens if primary is not None else 0,
        "polar_untrained_chain_tokens": sum(traces[i].trained_tokens for i in others),
        "polar_side_call_chains": sum(1 for t in traces if t.metadata.get("side_call")),
    } | verifier_metrics(result)
    return RolloutOutput(response, polar, metrics, problem, envelope)


def verifier_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The numbers a verifier wrote beside the reward (a Harbor task's reward.json: `lines_ok`, `lines_total`), as
    `verifier_<key>`: NeMo-RL logs a result's numeric fields per agent. Never `reward_components`, which NeMo-RL
    requires to sum to the reward. Beside them `polar_grader_<kind>`, 1 when the session reached for the grader
    that way (`evaluators.GRADER_TOUCHES`)."""
    details = ((result.get("stats") or {}).get("evaluation") or {}).get("details") or {}
    rewards, key = details.get("rewards") or {}, details.get("reward_key", "reward")
    touched = set(grader_touches(details))  # 0 or 1 per session: NeMo-RL's mean is the step's rate of attempts
    return {
        f"verifier_{k}": float(v)
        for k, v in rewards.items()
        if k != key and isinstance(v, int | float) and not isinstance(v, bool)
    } | {f"polar_grader_{kind}": float(kind in touched) for kind in GRADER_TOUCHES.values()}


def _load_traces(path: str | None) -> tuple[list[Trace], Verdict | None]:
    if not path:
        return [], None
    try:
        return read_jsonl(path), None
    except FileNotFoundError:
        # the node writes traces on its own disk: the agent must share it (as NeMo-RL's clusters do)
        return [], masked("polar:traces_unreadable", f"{path} is not readable here (no shared file system?)")
    except ValueError as exc:
        return [], masked("polar:traces_invalid", str(exc))


def rollout_result(
    row: dict[str, Any],
    session: dict[str, Any],
    *,
    task_id: str,
    model: str = "nemo_polar",
    builder: str = "prefix_tree",
    judged: Verdict | None = None,
) -> dict[str, Any]:
    """The whole `/run` result: `judged` (the resources server's verdict) or the session's own."""
    out = rollout_output(session, task_id=task_id, model=model, builder=builder)
    return assemble(row, out, judged or verdict(session))


def assemble(row: dict[str, Any], out: RolloutOutput, judged: Verdict) -> dict[str, Any]:
    """The `/run` result from the output and the verdict; a problem with the output masks it (a masked
    verdict keeps its own, more telling, failure kind)."""
    final = judged if judged.mask_sample else (out.problem or judged)
    return {
        "responses_create_params": row.get("responses_create_params") or {"input": []},
        "response": out.response,
        **final.fields(),
        **out.metrics,
        "polar": out.polar,
        **({"training_traces": out.training_traces} if out.training_traces else {}),
    }


def unavailable_kind(exc: ControlError) -> FailureKind:
    """Why the rollout server ran no session: it gave no answer, or it refused the task (or its result never came)."""
    return (
        FailureKind.TRANSPORT_UNREACHABLE if isinstance(exc, ControlUnreachable) else FailureKind.AGENT_REQUEST_FAILED
    )


def unavailable_result(
    row: dict[str, Any], task_id: str, reason: str, kind: FailureKind, model: str = "nemo_polar"
) -> dict[str, Any]:
    """The rollout server could not run the task at all (`kind` says why): masked, placeholder output. Made as the
    output of a session that holds nothing, so it has every field a session's result has (its metrics at zero)."""
    out = rollout_output({}, task_id=task_id, model=model)
    out.polar["session_id"] = None  # there was no session
    return assemble(row, out, masked(kind, reason))
