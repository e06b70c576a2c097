"""The project's errors, in one small hierarchy.

    PolarError
    ├── RequestInvalid          the caller's request is malformed (400)
    │   ├── BodyTooLarge        over the configured body limit (413)
    │   ├── UnknownRoute        no such path (404)
    │   ├── NotFound            no such task, session or node (404)
    │   └── Conflict            a duplicate id, or a change the state machine refuses (409)
    │       └── IllegalMove     a session moved backwards, out of a final state, or by a node not holding it
    ├── Unauthorized            unknown, missing or closed session key; missing or wrong control token (401)
    ├── Forbidden               not allowed by this server: e.g. an unsandboxed task (403)
    ├── UpstreamError           the inference server failed (status kept; 502 when it had none)
    │   ├── UpstreamTimeout     no answer in time (504)
    │   ├── UpstreamUnreachable connection refused or reset (502)
    │   ├── ContextOverflow     the prompt does not fit the model (400, context_length_exceeded)
    │   └── InvalidUpstream     an answer without token ids or logprobs: untrainable, never silent (502)
    ├── Paused                  generation is paused for a weight update and did not resume in time (503)
    ├── ControlError            a control-plane peer (rollout server, gateway node, callback URL) failed us
    │   ├── ControlUnreachable  no answer: connection refused or reset, or no answer in time (502)
    │   └── ControlRefused      an answer with an error status, kept as `status_code`
    ├── HarnessError            a harness could not be run: the node's fault, the session is masked
    │   └── HarnessNotInstalled missing, or installed at another version than its pin
    ├── SandboxError            a session's sandbox could not be made ready: masked
    │   └── SetupFailed         a `prepare` / `eval_prepare` step failed on its last try
    ├── EvaluationError         a reward could not be judged (no task repo, git failed): masked, never 0
    │   └── GitError            a git step of the patch extraction failed
    ├── TraceBuildError         records cannot become a faithful trace (e.g. a sampled span without logprobs)
    └── ConfigError             a configuration key or value is wrong (names the key)
        └── UnknownPlugin       a harness, runtime, builder or evaluator nobody registered (names the known ones)

Each dialect renders any of these in its own error shape (`Dialect.render_error`); `kind` is the
record status a failed call is stored with. Control routes (the proxy's admin routes, the rollout
server's, a gateway node's) answer every one in the same body (`nemo_polar.control.error_body`).
"""

from __future__ import annotations

from pydantic import ValidationError


def problems(exc: ValidationError, limit: int | None = None, whole: str = "body", prefix: str = "") -> list[str]:
    """pydantic's report as `field.path: message` lines (`whole` names an error about the whole input,
    `prefix` goes before every path)."""
    out = []
    for e in exc.errors()[:limit]:
        path = ".".join(str(p) for p in e["loc"])
        out.append(f"{prefix + path if path else whole}: {e['msg'].removeprefix('Value error, ')}")
    return out


class PolarError(Exception):
    """Base of every error the project raises on purpose."""

    status_code = 500
    kind = "error"

    def __init__(self, message: str, *, status_code: int | None = None):
        super().__init__(message)
        self.message = message
        if status_code is not None:
            self.status_code = status_code


class RequestInvalid(PolarError):
    """The caller sent something we cannot use; nothing is forwarded or recorded."""

    status_code = 400
    kind = "invalid_request"


class BodyTooLarge(RequestInvalid):
    status_code = 413


class UnknownRoute(RequestInvalid):
    status_code = 404
    kind = "not_found"


class NotFound(RequestInvalid):
    status_code = 404
    kind = "not_found"


class Conflict(RequestInvalid):
    status_code = 409
    kind = "conflict"


class IllegalMove(Conflict):
    """A state report the session's state machine refuses (see `contracts.legal`)."""


class BudgetSpent(RequestInvalid):
    """The session has spent its budget of calls or sampled tokens: a terminal 400, never one to retry."""

    kind = "budget_spent"


class Unauthorized(PolarError):
    status_code = 401
    kind = "unauthorized"


class Forbidden(PolarError):
    """The caller may use the route, but this server's configuration does not allow what it asked."""

    status_code = 403
    kind = "forbidden"


class UpstreamError(PolarError):
    """The inference server answered with an error or broke the connection."""

    status_code = 502
    kind = "upstream_error"


class UpstreamTimeout(UpstreamError):
    status_code = 504
    kind = "timeout"


class UpstreamUnreachable(UpstreamError):
    status_code = 502
    kind = "upstream_error"


class ContextOverflow(UpstreamError):
    status_code = 400
    kind = "context_overflow"


class InvalidUpstream(UpstreamError):
    """The upstream answered, but without what training needs (token ids, logprobs)."""

    status_code = 502
    kind = "invalid_upstream"


class Paused(PolarError):
    status_code = 503
    kind = "paused"


class ControlError(PolarError):
    """A control-plane request failed: raised by `nemo_polar.server.client` and nowhere else."""

    status_code = 502
    kind = "control"


class ControlUnreachable(ControlError):
    """No answer: the connection was refused or reset, or the answer did not come in time."""


class ControlRefused(ControlError):
    """The peer answered with an error status (kept as `status_code`) and this body."""

    def __init__(self, message: str, *, status_code: int, body: object = None):
        super().__init__(message, status_code=status_code)
        self.body = body


class HarnessError(PolarError, RuntimeError):
    """A harness could not be run for the node's sake (not the agent's): the session is masked."""

    kind = "harness"


class HarnessNotInstalled(HarnessError):
    """The harness is missing, or installed at another version than the pinned one."""


class SandboxError(PolarError, RuntimeError):
    """A session's sandbox could not be made ready (the node's or the task's fault, not the agent's): masked."""

    kind = "sandbox"


class SetupFailed(SandboxError):
    """A `prepare` or `eval_prepare` step failed on its last try; the message names the step."""


class EvaluationError(PolarError, RuntimeError):
    """The judgement could not be made (no task repo, git failed): the session is masked, never scored 0."""

    kind = "evaluation"


class GitError(EvaluationError):
    """A git step of the patch extraction or application failed."""


class TraceBuildError(PolarError, ValueError):
    kind = "trace_build"


class ConfigError(PolarError, ValueError):
    """A configuration key or value is wrong; the message names the key."""

    kind = "config"


class UnknownPlugin(ConfigError):
    """A harness, runtime, builder or evaluator name that is neither registered nor `package.module:Class`."""
