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

from .errors import BodyTooLarge, PolarError, RequestInvalid, Unauthorized, problems
from .serving import json_response

TOKEN_HEADER = "x-polar-control-token"
LOOPBACK = ("127.0.0.1", "localhost", "::1")  # beyond these, a server with control routes needs a token
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


MAX_BODY_BYTES = 16 * 2**20  # a task or a result, with its dataset row: megabytes at most
MAX_DEPTH = 64  # dataset rows and results nest a few levels; nothing stored needs more


async def read_json(request: Request, max_bytes: int = MAX_BODY_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """The body as JSON; an empty body is `{}` (e.g. a heartbeat with nothing to say). Over `max_bytes`
    (413) or nested deeper than `max_depth` (400) it is refused before anything looks at it."""
    size, chunks = 0, []
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise BodyTooLarge(f"the body is over the {max_bytes}-byte limit")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestInvalid(f"the body is not JSON: {exc}") from None
    if json_depth(data, max_depth) > max_depth:
        raise RequestInvalid(f"the body nests deeper than {max_depth} levels")
    return data


def json_depth(value: Any, stop: int | None = None) -> int:
    """How deep `value` nests (a scalar is 0), without recursion; counting stops past `stop`."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        node, depth = todo.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if stop is not None and deepest > stop:
            break
        todo.extend((child, depth + 1) for child in children)
    return deepest


def query_float(request: Request, name: str, default: float) -> float:
    """A query parameter as a number, or a 400 naming it."""
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        return float(text)
    except ValueError:
        raise RequestInvalid(f"{name}: a number, got {text!r}") from None


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
    "LOOPBACK",
    "TOKEN_HEADER",
    "error_body",
    "error_response",
    "http_error",
    "json_depth",
    "parse",
    "query_float",
    "read_json",
    "require_token",
    "route",
    "token_headers",
    "token_ok",
]
