"""One harness call, as named steps: admit (the session's key, the body within its size limit) ->
parse (the dialect, the session's unchanged history reused, the depth limit) -> hold (the generation
gate) -> target (server, model, upstream body with splices) -> forward (whole here; a stream through
`relay.py`) -> assemble (tokens + logprobs into a `chat.Completion`) -> record (`recorder.py`) ->
render (`render.py`).

Anything that fails before forwarding is the caller's fault: a 4xx in its dialect, nothing recorded
(a body the dialect cannot read, whatever its shape or depth, is one of them). Anything after is
recorded with its status; an answer's last byte goes out once its record is committed
(`store.durable`), so a proxy killed at any moment has a record of every answer a harness received
in full.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive

from ..config import LimitsConfig
from ..control import json_depth
from ..errors import BodyTooLarge, PolarError, RequestInvalid, Unauthorized, UpstreamError
from ..records import Session
from .backends import Backend
from .call import Call
from .dialects import Dialect
from .gate import GenerationGate, Hold
from .recorder import Recorder
from .relay import Relay, RelayResponse
from .render import error_response, whole_answer
from .sessions import Sessions
from .targets import Targets, base_url
from .upstream import Upstream

log = logging.getLogger("nemo_polar.proxy")

_CREDENTIAL_FIELDS = ("api_key", "apiKey", "key", "authorization")
_COUNT_DEPTH_BELOW = 4096  # bytes of body


def api_key(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth and auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("x-api-key") or request.headers.get("x-goog-api-key") or request.query_params.get("key")


def scrub(body: dict[str, Any]) -> dict[str, Any]:
    """The body without credential fields. Keys anywhere in a record (a tool output that printed the
    environment, a model that echoed one) are redacted by the store when it writes the record."""
    return {k: v for k, v in body.items() if k not in _CREDENTIAL_FIELDS}


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body of {declared} bytes is over the {limit}-byte limit")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body is over the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


class CallPipeline:
    def __init__(
        self,
        limits: LimitsConfig,
        sessions: Sessions,
        backend: Backend,
        upstream: Upstream,
        gate: GenerationGate,
        targets: Targets,
        recorder: Recorder,
    ):
        self.limits, self.sessions, self.backend, self.upstream = limits, sessions, backend, upstream
        self.gate, self.targets, self.recorder = gate, targets, recorder

    async def run(self, dialect: Dialect, request: Request) -> Response:
        """The call from the harness's request to its response: every dialect route's endpoint. A
        streamed call goes on in `relay`; one answered whole is forwarded and assembled here while
        it holds its place at the gate, recorded and rendered once it has left (inline: a coroutine
        more would be one more frame for every wake-up of the call)."""
        arrived, tally = time.monotonic(), None
        try:
            key = api_key(request)
            session = self.sessions.by_key(key) if key else None
            if session is None:
                raise Unauthorized("unknown or missing API key: use the session key you were given")
            tally = self.sessions.tally(session.id)
            tally.arrived += 1
            call = await self.admit(session, request, dialect)
            call.arrived = arrived
            await self.take_budget(call)
        except PolarError as err:
            if tally is not None:
                tally.refused += 1
            return error_response(dialect, err)
        try:
            try:
                hold = self.gate.enter() or await self.gate.wait()
            except PolarError as err:
                await self.recorder.record(call, None, err)
                return error_response(dialect, err)
            if call.request.stream and self.backend.streams:
                return await self.relay(call, hold)
            with hold:  # the answer is in, or the call failed (its failure recorded first)
                try:
                    await self.target(call)
                    call.ask()
                    # the prompt's ids that the session's last answer had are not parsed again
                    read = functools.partial(self.sessions.prompt_ids.parse, call.session.id, self.backend)
                    body = await self.upstream.post_json(chat_url(call), call.upstream_json(), read)
                    call.answered()
                    completion = self.backend.parse_response(body)
                except Exception as exc:  # noqa: BLE001 - recorded and answered in dialect
                    return await self.failed(call, exc)
            if gone(request.receive):  # the harness gave up waiting: not an answer it has
                await self.recorder.record(call, completion, status="client_disconnected", error="client disconnected")
                return Response(status_code=499)
            await self.recorder.record(call, completion)
            answer = whole_answer(dialect, call.request, completion)
            self.sessions.took(call)
            return answer
        except BaseException:
            self.sessions.budgets.settle(call, 0)  # cancelled before it was recorded: the call counted
            raise

    async def take_budget(self, call: Call) -> None:
        """The call's place in its session's budget, taken before it goes anywhere: refused once the calls
        recorded and in flight fill it, and capped at the tokens left once the calls in flight hold theirs."""
        session = call.session
        if session.max_calls is None and session.max_sampled is None:
            return
        call.held = await self.sessions.budgets.take(session, call.request.max_tokens)
        call.budgeted = True
        if call.held is not None:
            call.request.max_tokens = call.held

    async def admit(self, session: Session, request: Request, dialect: Dialect) -> Call:
        """The session's call: its body within the size limit, parsed."""
        raw = await read_body(request, self.limits.max_body_bytes)
        return self.parse(session, dialect, raw, request)

    def parse(self, session: Session, dialect: Dialect, raw: bytes, request: Request) -> Call:
        """The body as the dialect reads it, in canonical form, capped at the configured and the
        session's `max_tokens`."""
        # the history items unchanged since the session's last call are neither parsed nor validated
        # again, nor walked for their depth (they were, then)
        parsed = self.sessions.history.parse(session.id, dialect, raw)
        limit = self.limits.max_depth
        # a body can nest no deeper than it has brackets: a short one is counted rather than walked
        counted = len(raw) < _COUNT_DEPTH_BELOW and raw.count(b"{") + raw.count(b"[") <= limit
        if not counted and json_depth(parsed.fresh, limit) > limit:
            raise RequestInvalid(f"request body nests deeper than {limit} levels")
        params = dict(request.path_params) | {"path": request.scope["path"]}
        raw_query = request.scope["query_string"]
        # parsed only when there is one (Gemini streams), without the cost of Starlette's QueryParams
        query = dict(parse_qsl(raw_query.decode("latin-1"), keep_blank_values=True)) if raw_query else {}
        try:
            self.sessions.history.validate(dialect, parsed)
            chat = dialect.parse_request(parsed.body, params, query)
        except PolarError:
            raise
        except Exception as exc:  # noqa: BLE001 - a shape the dialect's parser did not expect is the caller's
            raise RequestInvalid(f"malformed request: {type(exc).__name__}: {str(exc)[:200]}") from None
        if parsed.seen is not None:
            self.sessions.history.keep(session.id, parsed.seen)
        native = parsed.native
        for cap in (self.limits.max_tokens, session.max_tokens):
            if cap is not None:
                chat.max_tokens = min(chat.max_tokens or cap, cap)
        return Call(session, dialect, scrub(native), raw, chat, self.sessions.next_seq(session.id))

    async def target(self, call: Call) -> None:
        """Where the call goes, under which model name, and the body it sends there. A session
        opened with its own `upstream_url` (a task's inference server) goes there; the name is the
        session's `upstream_model`, else the configured one (for the configured server only), else
        the first model that server lists: never a name the server does not serve."""
        session, info = call.session, self.targets.info
        url = base_url(session.upstream_url) if session.upstream_url else info.url
        model = session.upstream_model or (info.model if url == info.url else None)
        if not model:
            if not self.backend.lists_models:
                raise UpstreamError(f"{self.backend.no_model_name()}, or open the session with upstream_model")
            model = await self.upstream.served_model(url)
        call.target = self.targets.get(url, model)
        try:
            # the session's sampled turns, kept (and read back from the store) only for engines that splice
            splices = self.sessions.splices(session.id) if self.backend.splices else None
            call.upstream_body = self.backend.build_body(call.request, splices, model)
        except PolarError:
            raise
        except Exception as exc:  # noqa: BLE001 - the request parsed but cannot be sent: the caller's
            raise RequestInvalid(f"malformed request: {type(exc).__name__}: {str(exc)[:200]}") from None
        self.recorder.prepare_soon(call)

    async def relay(self, call: Call, hold: Hold) -> Response:
        """A streamed call: targeted and opened here, then relayed (`relay.Relay`), which releases
        the hold when it closes."""
        try:
            await self.target(call)
            call.ask()
            response = await self.upstream.open_stream(chat_url(call), call.upstream_json())
        except BaseException as exc:  # refused, failed or cancelled before a relay holds the call
            with hold:  # the call leaves the gate here, its failure recorded first
                if not isinstance(exc, Exception):
                    raise
                return await self.failed(call, exc)
        return RelayResponse(Relay(self.upstream, self.backend, self.recorder, call, response, hold))

    async def failed(self, call: Call, exc: Exception) -> Response:
        """A call that failed once admitted: recorded with its status, answered in its dialect. What
        is not a `PolarError` is a bug of ours: a 500."""
        if isinstance(exc, UpstreamError):
            err = self.backend.explain(exc, call.upstream_body)
        elif isinstance(exc, PolarError):
            err = exc
        else:
            log.exception("call %s/%d failed", call.session.id, call.seq)
            err = PolarError(f"internal error: {type(exc).__name__}")
        await self.recorder.record(call, None, err)
        return error_response(call.dialect, err)


def chat_url(call: Call) -> str:
    assert call.target is not None
    return call.target.url + "/v1/chat/completions"


def gone(receive: Receive) -> bool:
    """Whether the client has disconnected, asked without waiting. ASGI has no such question: uvicorn's
    request cycle (every app here runs on it: `serving.py`) keeps the answer in its `disconnected` flag;
    under another server `receive()` is stepped once and dropped if it would wait, what Starlette's
    `is_disconnected()` does under an anyio cancel scope (3% of a not-streamed call's CPU)."""
    disconnected = getattr(getattr(receive, "__self__", None), "disconnected", None)
    if isinstance(disconnected, bool):
        return disconnected
    step = receive()
    try:
        step.send(None)
    except StopIteration as done:
        return done.value.get("type") == "http.disconnect"
    step.close()  # it was waiting for the client: nothing has come
    return False
