"""The proxy's HTTP surface: routes, session resolution, the call pipeline, streaming relay.

One call runs as named steps: authenticate -> read body -> parse (dialect) -> build upstream body
(backend) -> forward -> record -> render (dialect). Anything that fails before forwarding is the
caller's fault: a 4xx in its dialect, nothing recorded (a body the dialect cannot read, whatever its
shape or depth, is one of them). Anything after is recorded with its status; an answer's last byte
goes out once its record is committed (`store.durable`), so a proxy killed at any moment has a record
of every answer a harness received in full.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Match, Route
from starlette.types import Message, Receive, Scope, Send

from ..chat import ChatRequest, Completion, Delta, ToolCallDelta
from ..config import ProxyConfig
from ..control import error_response as control_error
from ..control import json_depth, query_float, route
from ..errors import BodyTooLarge, PolarError, RequestInvalid, Unauthorized, UnknownRoute, problems
from ..metrics import ProxyMetrics, scrape
from ..record_codec import Bodies
from ..records import CompletionRecord, Session, UpstreamInfo
from ..serving import json_response
from ..store import SqliteStore
from .backends import BACKENDS
from .dialects import DIALECTS, Dialect, guess_dialect
from .gate import GenerationGate
from .history import loads
from .http import Response as UpstreamResponse
from .ids import ordered_hex
from .sessions import Sessions
from .splice import SpliceIndex
from .upstream import Upstream

log = logging.getLogger("nemo_polar.proxy")

_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_SSE_RAW_HEADERS = StreamingResponse((), media_type="text/event-stream", headers=_SSE_HEADERS).raw_headers
_CREDENTIAL_FIELDS = ("api_key", "apiKey", "key", "authorization")
_MATCHED_PATHS = 1024
PREPARE_FROM = 16384  # bytes of body: a shorter call's bodies are encoded with its record, if at all


def error_response(dialect: Dialect, err: PolarError) -> Response:
    return json_response(dialect.render_error(err), err.status_code)


def api_key(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth and auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("x-api-key") or request.headers.get("x-goog-api-key") or request.query_params.get("key")


def scrub(body: dict[str, Any]) -> dict[str, Any]:
    """The body without credential fields. Keys anywhere in a record (a tool output that printed the
    environment, a model that echoed one) are redacted by the store when it writes the record."""
    return {k: v for k, v in body.items() if k not in _CREDENTIAL_FIELDS}


class SessionOpening(BaseModel):
    """`POST /admin/sessions`: a capture session, optionally with its own inference server."""

    model_config = ConfigDict(extra="forbid")

    metadata: dict[str, Any] = Field(default_factory=dict)
    upstream_url: str | None = None
    upstream_model: str | None = None
    max_tokens: int | None = Field(None, ge=1)


@dataclass(slots=True)
class Call:
    """One harness call in flight."""

    session: Session
    dialect: Dialect
    native: dict[str, Any]
    raw: bytes
    request: ChatRequest
    seq: int
    id: str = field(default_factory=ordered_hex)  # its record's
    started_at: float = field(default_factory=time.time)
    target: UpstreamInfo | None = None  # where this call goes: its session's server, or the proxy's
    upstream_body: dict[str, Any] | None = None
    first_token_at: float | None = None
    upstream_s: float | None = None  # the inference server's own time, for a call answered whole
    stored: Bodies | None = None  # its bodies as the store keeps them, encoded while the upstream works

    def prepare(self, store: SqliteStore) -> None:
        """Encode the bodies for the record now, while the upstream generates: a long history is
        work the answer then need not wait for."""
        self.stored = store.prepare(self.session.id, self.id, self.native, self.upstream_body)


class Proxy:
    def __init__(self, config: ProxyConfig, store: SqliteStore | None = None):
        self.config = config
        self.store = store or SqliteStore(config.store.path)
        self.sessions = Sessions(self.store)
        up = config.upstream
        self.backend = BACKENDS[up.engine](up.sampling)
        self.upstream = Upstream(up.timeout_s, up.connect_timeout_s)
        self.gate = GenerationGate(config.pause_wait_s)
        self.metrics = ProxyMetrics()
        self.info = UpstreamInfo(
            engine=up.engine, url=base_url(up.url), model=up.model or "", policy_version=up.policy_version
        )
        self._targets: dict[tuple[str, str], UpstreamInfo] = {}
        self._calls: dict[str, Route] = {}  # the dialects' routes by exact path
        self._patterned_calls: list[Route] = []  # and those with parameters (Gemini's model)
        self._matched: dict[str, tuple[Route, dict[str, Any]]] = {}  # paths seen, their route and parameters
        self.starlette = Starlette(routes=self._routes(), lifespan=self._lifespan)

    @property
    def control_token(self) -> str | None:
        return self.config.control_token

    @property
    def recording(self) -> bool:
        return self.store.healthy

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app. A harness's call goes straight to its dialect's handler; the rest (probes,
        admin, unknown routes, other methods) through Starlette, whose middleware and router walk
        cost a call more CPU than parsing its body."""
        if scope["type"] == "http" and not scope.get("root_path"):
            path = scope["path"]
            route = self._calls.get(path)
            if route is None:
                route, params = self._matched.get(path) or self._match(scope)
                if route is not None:
                    scope["endpoint"], scope["path_params"] = route.endpoint, dict(params)
            if route is not None and route.methods and scope["method"] in route.methods:
                response = await route.endpoint(Request(scope, receive))
                await response(scope, receive, send)
                return
        await self.starlette(scope, receive, send)

    def _match(self, scope: Scope) -> tuple[Route | None, dict[str, Any]]:
        """The patterned route (Gemini's, the model in the path) a path matches, remembered for the next
        call on it: a harness uses one path, and a regex walk costs a call more than a dict look-up."""
        for candidate in self._patterned_calls:
            match, child = candidate.matches(scope)
            if match is Match.FULL:
                if len(self._matched) < _MATCHED_PATHS:  # bounded: the model name is the caller's to choose
                    self._matched[scope["path"]] = (candidate, child["path_params"])
                return candidate, child["path_params"]
        return None, {}

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        await self.upstream.close()

    def _routes(self) -> list[Route]:
        routes = [
            Route("/", self.root, methods=["GET", "HEAD"]),
            Route("/health", self.root, methods=["GET"]),
            Route("/metrics", self.prometheus, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/models", self.models, methods=["GET"]),
            Route("/admin/sessions", self.route_open, methods=["POST"]),
            Route("/admin/sessions/{session_id}/close", self.route_close, methods=["POST"]),
            Route("/admin/sessions/{session_id}/completions", self.route_records, methods=["GET"]),
            Route("/admin/inference/status", self.gate_status, methods=["GET"]),
            Route("/admin/inference/pause", self.pause, methods=["POST"]),
            Route("/admin/inference/resume", self.resume, methods=["POST"]),
        ]
        for dialect in DIALECTS.values():
            for path, methods in dialect.routes:
                route = Route(path, self._handler(dialect), methods=methods)
                routes.append(route)
                if route.param_convertors:
                    self._patterned_calls.append(route)
                else:
                    self._calls[path] = route
        routes.append(Route("/{path:path}", self.unknown, methods=["GET", "POST", "PUT", "DELETE", "PATCH"]))
        return routes

    # --- the call pipeline --------------------------------------------------------------------
    def _handler(self, dialect: Dialect):
        async def handle(request: Request) -> Response:
            try:
                call = await self._admit(request, dialect)
            except PolarError as err:
                return error_response(dialect, err)
            try:
                await self.gate.acquire()
            except PolarError as err:
                await self._record(call, None, err)
                return error_response(dialect, err)
            self.metrics.upstream(+1)
            streaming = False
            try:
                call.target = await self._target(call.session)
                call.upstream_body = self._build_body(call)
                if len(call.raw) >= PREPARE_FROM:  # runs once the request is on its way, while it waits
                    asyncio.get_running_loop().call_soon(call.prepare, self.store)
                if call.request.stream and self.backend.streams:
                    response = await self._open_relay(call)
                    streaming = True  # the relay owns the gate slot from here
                    return response
                asked = time.monotonic()
                # the prompt's ids that the session's last answer had are not parsed again
                read = functools.partial(self.sessions.prompt_ids.parse, call.session.id, self.backend)
                body = await self.upstream.post_json(self._chat_url(call), call.upstream_body, read)
                call.upstream_s = time.monotonic() - asked
                completion = self.backend.parse_response(body)
            except PolarError as err:
                await self._record(call, None, err)
                return error_response(dialect, err)
            except Exception as exc:  # noqa: BLE001 - a bug of ours: recorded, answered in dialect
                log.exception("call %s/%d failed", call.session.id, call.seq)
                err = PolarError(f"internal error: {type(exc).__name__}")
                await self._record(call, None, err)
                return error_response(dialect, err)
            finally:
                if not streaming:
                    self.gate.release()
                    self.metrics.upstream(-1)
            if gone(request.receive):  # the harness gave up waiting: not an answer it has
                await self._record(call, completion, status="client_disconnected", error="client disconnected")
                return Response(status_code=499)
            await self._record(call, completion)
            if call.request.stream:  # the engine answered whole: play it as this dialect's stream
                renderer = dialect.stream_renderer(call.request)
                events = [e for d in replay(completion) for e in renderer.delta(d)] + renderer.finish(completion)
                return Response(b"".join(events), media_type="text/event-stream", headers=_SSE_HEADERS)
            return json_response(dialect.render_response(completion, call.request))

        return handle

    def _splices(self, call: Call) -> SpliceIndex | None:
        """The session's sampled turns, kept (and read back from the store) only for engines that splice."""
        return self.sessions.splices(call.session.id) if self.backend.splices else None

    async def _admit(self, request: Request, dialect: Dialect) -> Call:
        key = api_key(request)
        session = self.sessions.by_key(key) if key else None
        if session is None:
            raise Unauthorized("unknown or missing API key: use the session key you were given")
        raw = await self._read_body(request)
        # the history items unchanged since the session's last call are neither parsed nor validated
        # again, nor walked for their depth (they were, then)
        parsed = self.sessions.history.parse(session.id, dialect, raw)
        limit = self.config.limits.max_depth
        if json_depth(parsed.fresh, limit) > limit:
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
        for cap in (self.config.limits.max_tokens, session.max_tokens):
            if cap is not None:
                chat.max_tokens = min(chat.max_tokens or cap, cap)
        return Call(session, dialect, scrub(native), raw, chat, self.sessions.next_seq(session.id))

    async def _read_body(self, request: Request) -> bytes:
        limit = self.config.limits.max_body_bytes
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

    def _build_body(self, call: Call) -> dict[str, Any]:
        try:
            return self.backend.build_body(call.request, self._splices(call), call.target.model)  # type: ignore[union-attr]
        except PolarError:
            raise
        except Exception as exc:  # noqa: BLE001 - the request parsed but cannot be sent: the caller's
            raise RequestInvalid(f"malformed request: {type(exc).__name__}: {str(exc)[:200]}") from None

    async def _target(self, session: Session) -> UpstreamInfo:
        """Where a session's calls go, under which model name. A session opened with its own
        `upstream_url` (a task's inference server) goes there; the name is the session's
        `upstream_model`, else the configured one (for the configured server only), else the first
        model that server lists: never a name the server does not serve."""
        url = base_url(session.upstream_url) if session.upstream_url else self.info.url
        model = session.upstream_model or (self.info.model if url == self.info.url else None)
        if not model:
            model = await self.upstream.served_model(url)
        target = self._targets.get((url, model))
        if target is None:
            target = self._targets[(url, model)] = self.info.model_copy(update={"url": url, "model": model})
        return target

    @staticmethod
    def _chat_url(call: Call) -> str:
        assert call.target is not None
        return call.target.url + "/v1/chat/completions"

    async def _open_relay(self, call: Call) -> Response:
        response = await self.upstream.open_stream(self._chat_url(call), call.upstream_body)  # refused: raises
        return RelayResponse(Relay(self, call, response))

    def _record(
        self,
        call: Call,
        completion: Completion | None,
        err: PolarError | None = None,
        status: str | None = None,
        error: str | None = None,
        wait: bool = True,
    ) -> asyncio.Future[None]:
        """Queue the call's record; the future is done once it is committed (at once when the store is
        not durable, or with `wait=False`)."""
        c = completion
        if c is not None and self.backend.splices:
            self.sessions.splices(call.session.id).add(c)
        finished = time.time()
        self.metrics.call(
            call.dialect.name,
            status or (err.kind if err else "ok"),
            len(c.prompt_token_ids) if c else 0,
            len(c.completion_token_ids) if c else 0,
            None if call.upstream_s is None else finished - call.started_at - call.upstream_s,
            None if call.first_token_at is None else call.first_token_at - call.started_at,
        )
        # built from our own values: validation would only cost time on the response path
        record = CompletionRecord.model_construct(
            id=call.id,
            session_id=call.session.id,
            seq=call.seq,
            started_at=call.started_at,
            finished_at=finished,
            first_token_at=call.first_token_at,
            dialect=call.dialect.name,
            stream=call.request.stream,
            native_request=call.native,
            upstream_request=call.upstream_body,
            prompt_token_ids=c.prompt_token_ids if c else [],
            completion_token_ids=c.completion_token_ids if c else [],
            completion_logprobs=c.completion_logprobs if c else [],
            finish_reason=c.finish_reason if c else None,
            message=c.message_dict() if c else None,
            usage={"prompt_tokens": c.usage.prompt_tokens, "completion_tokens": c.usage.completion_tokens}
            if c
            else {},
            upstream=_served_by(call.target or self.info, c),
            status=status or (err.kind if err else "ok"),
            error=error or (err.message if err else None),
        )
        if wait and self.config.store.durable:
            return self.store.durable(record, call.stored)
        self.store.add_record(record, bodies=call.stored)
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    # --- plain routes -------------------------------------------------------------------------
    async def prometheus(self, request: Request) -> Response:
        return scrape(self.metrics.registry)

    async def root(self, request: Request) -> Response:
        """200 while calls are recorded; 503 (saying why) while the store cannot write them."""
        store = self.store
        recording = {"ok": store.healthy, "problem": store.problem}
        if not store.healthy and store.problem is None:
            recording["problem"] = "the record writer has stopped"
        body = {"status": "ok" if store.healthy else "degraded", "service": "nemo_polar-proxy"}
        body |= {"engine": self.info.engine, "recording": recording}
        return json_response(body, 200 if store.healthy else 503)

    async def models(self, request: Request) -> Response:
        try:  # the name the server serves; harnesses may ask for any name, every call goes to that one
            name = self.info.model or await self.upstream.served_model(self.info.url)
        except PolarError:
            name = "polar"
        model = {
            "id": name,
            "object": "model",
            "type": "model",
            "owned_by": "nemo_polar",
            "display_name": name,
            "created": 0,
            "created_at": "1970-01-01T00:00:00Z",
        }
        return json_response({"object": "list", "data": [model], "has_more": False})

    async def unknown(self, request: Request) -> Response:
        dialect = guess_dialect(request.url.path, request.headers)
        return error_response(dialect, UnknownRoute(f"no route for {request.method} {request.url.path}"))

    # --- admin --------------------------------------------------------------------------------
    @route(guarded=True)
    async def route_open(self, request: Request) -> Response:
        raw = await self._read_body(request)
        try:
            opening = SessionOpening.model_validate(loads(raw) if raw else {})
        except ValidationError as exc:
            raise RequestInvalid("; ".join(problems(exc))) from None
        session = self.sessions.open(**opening.model_dump())
        return json_response({"session_id": session.id, "api_key": session.api_key}, 201)

    @route(guarded=True)
    async def route_close(self, request: Request) -> Response:
        await asyncio.to_thread(self.close_session, request.path_params["session_id"])
        return json_response({"closed": True})

    @route(guarded=True)
    async def route_records(self, request: Request) -> Response:
        records = await asyncio.to_thread(self.records, request.path_params["session_id"])
        return json_response({"data": [r.model_dump() for r in records]})

    @route(guarded=True)
    async def gate_status(self, request: Request) -> Response:
        return json_response(self.gate.status() | {"engine": self.info.engine, "url": self.info.url})

    @route(guarded=True)
    async def pause(self, request: Request) -> Response:
        if not await self.gate.pause(query_float(request, "timeout_seconds", 300.0)):
            err = PolarError("in-flight calls did not drain in time", status_code=504)
            err.kind = "timeout"
            return control_error(err, **self.gate.status())
        return json_response(self.gate.status())

    @route(guarded=True)
    async def resume(self, request: Request) -> Response:
        """`?policy_version=N`: the weights just loaded; every call from now on is recorded with it."""
        version = request.query_params.get("policy_version")
        if version is not None:
            self.set_policy_version(version)
        self.gate.resume()
        return json_response(self.gate.status() | {"policy_version": self.info.policy_version})

    def set_policy_version(self, version: str) -> None:
        self.info = self.info.model_copy(update={"policy_version": version})
        self._targets.clear()  # they carry the version too

    # --- what a gateway node uses (server/gateway/proxy_surface.ProxySurface) ---------------------
    def open_session(self, **opening: Any) -> Session:
        """A capture session (`metadata`, `upstream_url`, `upstream_model`, `max_tokens`)."""
        return self.sessions.open(**opening)

    def close_session(self, session_id: str) -> None:
        self.sessions.close(session_id)

    def records(self, session_id: str) -> list[CompletionRecord]:
        """Every call of the session recorded so far, the queued ones included (waits for the writer;
        raises when it cannot, so a session is never built from part of its calls)."""
        if not self.store.flush(self.config.store.flush_timeout_s):
            raise PolarError(f"records of session {session_id} not written: {self.store.problem or 'writer stopped'}")
        return self.store.records(session_id)

    def on_pause(self, listener: Callable[[bool], None]) -> None:
        self.gate.listeners.append(listener)

    async def aclose(self) -> None:
        await self.upstream.close()

    def close(self) -> None:
        self.store.close()

    def metric_registries(self) -> list[Any]:
        return [self.metrics.registry]


class Relay:
    """Relays one upstream stream to the harness as its dialect's events, and records it once."""

    def __init__(self, proxy: Proxy, call: Call, response: UpstreamResponse):
        self.proxy, self.call, self.response = proxy, call, response
        self.chunks = proxy.upstream.events(response)
        self.completion: Completion | None = None
        self.failure: PolarError | None = None
        self.recorded = False
        self.closed = False
        self.start: Message | None = None  # the response's start, until it goes out with the first events

    async def stream(self, send: Send, start: Message) -> None:
        """Sends the harness's events: one write per upstream read (each write is a syscall and a
        trip through the ASGI send chain), the closing events in the same write as the last tokens,
        and the response's `start` just before the first events (sent apart, it would wake the
        harness once more for nothing)."""
        self.start = start
        call, proxy = self.call, self.proxy
        renderer = call.dialect.stream_renderer(call.request)
        assembler = proxy.backend.stream_parser()
        out: list[bytes] = []
        committed: asyncio.Future[None] | None = None
        try:
            async for batch, done in self.chunks:
                for chunk in batch:
                    for delta in assembler.feed(chunk):
                        out += renderer.delta(delta)
                if out and call.first_token_at is None:
                    call.first_token_at = time.time()
                if done:
                    self.completion = assembler.result()
                    committed = self._finish()
                    out += renderer.finish(self.completion)
                    break
                if out:
                    await self._send(send, out, True)
                    out = []
        except PolarError as err:
            self.failure = err
            committed = self._finish()
            out += renderer.error(err)
        except Exception as exc:  # noqa: BLE001 - a bug of ours: recorded, and the stream ends in dialect
            log.exception("stream of call %s/%d failed", call.session.id, call.seq)
            self.failure = PolarError(f"internal error: {type(exc).__name__}")
            committed = self._finish()
            out += renderer.error(self.failure)
        if committed is not None:
            await committed  # the last byte goes out once the record is in the store
        await self._send(send, out, False)

    async def _send(self, send: Send, events: list[bytes], more: bool) -> None:
        if self.start is not None:
            await send(self.start)
            self.start = None
        await send({"type": "http.response.body", "body": b"".join(events), "more_body": more})

    def _finish(self) -> asyncio.Future[None] | None:
        """Record the outcome once, before the closing events go out (a read after them sees it)."""
        if self.recorded:
            return None
        self.recorded = True
        if self.completion is not None:
            return self.proxy._record(self.call, self.completion)
        if self.failure is not None:
            return self.proxy._record(self.call, None, self.failure)
        return self.proxy._record(
            self.call, None, status="client_disconnected", error="client disconnected mid-stream", wait=False
        )

    def close(self) -> None:
        """Idempotent: runs when the stream ended, failed, or the harness went away."""
        if self.closed:
            return
        self.closed = True
        self._finish()
        try:
            self.response.release()
        finally:
            self.proxy.gate.release()
            self.proxy.metrics.upstream(-1)


class RelayResponse(Response):
    """The relay as a response: stops it when the harness goes away, and closes it even if it never
    ran. One watcher task does what Starlette's per-response anyio task group would, for less, and
    only once the relay waits for the upstream: only a relay that waits can be interrupted, and an
    answer that is all there already goes out without a pause."""

    def __init__(self, relay: Relay):  # the headers are every relay's: built once, below
        self.relay = relay
        self.status_code = 200
        self.raw_headers = list(_SSE_RAW_HEADERS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        relaying = asyncio.current_task()
        assert relaying is not None
        gone = False
        watcher: asyncio.Future[None] | None = None

        async def watch() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            relaying.cancel()

        def watch_from_now() -> None:
            nonlocal watcher
            watcher = asyncio.ensure_future(watch())

        self.relay.response.before_wait = watch_from_now
        try:
            start = {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            await self.relay.stream(send, start)
        except asyncio.CancelledError:
            if not gone:
                raise
            relaying.uncancel()  # the harness left: the relay records that, nothing else to do
        finally:
            # no await since the last send: the watcher, woken by the response completing, never ran
            if watcher is not None:
                watcher.cancel()
            self.relay.close()


def gone(receive: Receive) -> bool:
    """Whether the client has disconnected, asked without waiting. ASGI has no such question, so
    `receive()` is stepped once and dropped if it would wait: what Starlette's `is_disconnected()`
    does under an anyio cancel scope, which cost 3% of a not-streamed call's CPU."""
    step = receive()
    try:
        step.send(None)
    except StopIteration as done:
        return done.value.get("type") == "http.disconnect"
    step.close()  # it was waiting for the client: nothing has come
    return False


def _served_by(target: UpstreamInfo, c: Completion | None) -> UpstreamInfo:
    """The policy version the server reported for this call wins over the one the operator set."""
    if c is None or c.policy_version is None or c.policy_version == target.policy_version:
        return target
    return target.model_copy(update={"policy_version": c.policy_version})


def base_url(url: str) -> str:
    """An inference server's address without a trailing `/v1` (NeMo-RL hands out `.../v1`)."""
    return url.rstrip("/").removesuffix("/v1")


def replay(c: Completion) -> list[Delta]:
    """A whole completion as the deltas a stream would have carried."""
    deltas = []
    if c.reasoning:
        deltas.append(Delta(reasoning=c.reasoning))
    if c.text:
        deltas.append(Delta(text=c.text))
    for i, t in enumerate(c.tool_calls):
        deltas.append(Delta(tool_call=ToolCallDelta(i, t.id, t.name, t.arguments)))
    return deltas
