"""Control routes, server side: the token check and the one error body.

Control routes are the rollout server's (tasks, nodes, callbacks, admin), a gateway node's
(`/sessions`) and the proxy's admin routes. Every one of them that wants a token compares it in
constant time (`token_ok`), and every error any of them answers has one body:

    {"error": {"status": 404, "type": "not_found", "message": "no task 't1'"}}

`route` wraps a handler with both; `parse` and `read_json` turn bad input into a 400 that names
each bad field. The client side of these routes is `nemo_polar.server.client`.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from .errors import PolarError, RequestInvalid, Unauthorized, problems
from .serving import json_response

TOKEN_HEADER = "x-polar-control-token"
M = TypeVar("M", bound=BaseModel)


def token_ok(expected: str | None, given: str | None) -> bool:
    """No token configured: open. Otherwise the header must match, compared in constant time."""
    if expected is None:
        return True
    return hmac.compare_digest((given or "").encode(), expected.encode())


def require_token(request: Request, expected: str | None) -> None:
    if not token_ok(expected, request.headers.get(TOKEN_HEADER)):
        raise Unauthorized(f"this route needs the {TOKEN_HEADER} header")


def token_headers(token: str | None) -> dict[str, str]:
    """What a client sends to a route guarded by `token`."""
    return {TOKEN_HEADER: token} if token else {}


def error_body(err: PolarError, **extra: Any) -> dict[str, Any]:
    return {"error": {"status": err.status_code, "type": err.kind, "message": err.message}, **extra}


def error_response(err: PolarError, **extra: Any) -> Response:
    return json_response(error_body(err, **extra), err.status_code)


def parse(model: type[M], data: Any) -> M:
    """`data` as `model`, or a RequestInvalid naming every bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestInvalid(f"invalid {model.__name__}: " + "; ".join(problems(exc, whole="(body)"))) from None


async def read_json(request: Request) -> Any:
    """The body as JSON; an empty body is `{}` (e.g. a heartbeat with nothing to say)."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestInvalid(f"the body is not JSON: {exc}") from None


class Guarded(Protocol):
    """Who owns control routes: the token they want (None: open)."""

    @property
    def control_token(self) -> str | None: ...


G = TypeVar("G", bound=Guarded)
Handler = Callable[[G, Request], Awaitable[Response]]


def route(*, guarded: bool) -> Callable[[Handler[G]], Handler[G]]:
    """A control route: with `guarded`, the owner's `control_token` is required; any PolarError is
    answered with `error_body`."""

    def wrap(handler: Handler[G]) -> Handler[G]:
        @functools.wraps(handler)
        async def wrapped(owner: G, request: Request) -> Response:
            try:
                if guarded:
                    require_token(request, owner.control_token)
                return await handler(owner, request)
            except PolarError as err:
                return error_response(err)

        return wrapped

    return wrap


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (an unknown path or method) in the same body."""
    assert isinstance(exc, HTTPException)
    err = PolarError(f"{request.method} {request.url.path}: {exc.detail}", status_code=exc.status_code)
    err.kind = "not_found" if exc.status_code == 404 else "method_not_allowed" if exc.status_code == 405 else "error"
    return error_response(err)


__all__ = [
    "TOKEN_HEADER",
    "error_body",
    "error_response",
    "http_error",
    "parse",
    "read_json",
    "require_token",
    "route",
    "token_headers",
    "token_ok",
]
