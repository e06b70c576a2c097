"""The project's errors, in one small hierarchy.

    PolarError
    ├── RequestInvalid          the caller's request is malformed (400)
    │   ├── BodyTooLarge        over the configured body limit (413)
    │   └── UnknownRoute        no such path (404)
    ├── Unauthorized            unknown or missing session key (401)
    ├── UpstreamError           the inference server failed (status kept; 502 when it had none)
    │   ├── UpstreamTimeout     no answer in time (504)
    │   ├── UpstreamUnreachable connection refused or reset (502)
    │   ├── ContextOverflow     the prompt does not fit the model (400, context_length_exceeded)
    │   └── InvalidUpstream     an answer without token ids or logprobs: untrainable, never silent (502)
    ├── Paused                  generation is paused for a weight update and did not resume in time (503)
    ├── TraceBuildError         records cannot become a faithful trace (e.g. a sampled span without logprobs)
    └── ConfigError             a configuration key or value is wrong (names the key)

Each dialect renders any of these in its own error shape (`Dialect.render_error`); `kind` is the
record status a failed call is stored with.
"""

from __future__ import annotations

from pydantic import ValidationError


def problems(exc: ValidationError, limit: int | None = None, whole: str = "body") -> list[str]:
    """pydantic's report as `field.path: message` lines (`whole` names an error about the whole input)."""
    return [f"{'.'.join(str(p) for p in e['loc']) or whole}: {e['msg']}" for e in exc.errors()[:limit]]


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


class Unauthorized(PolarError):
    status_code = 401
    kind = "unauthorized"


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


class TraceBuildError(PolarError, ValueError):
    kind = "trace_build"


class ConfigError(PolarError, ValueError):
    """A configuration key or value is wrong; the message names the key."""

    kind = "config"
