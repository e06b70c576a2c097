"""The page's server: its static files and a small JSON API over one `Source`, run by `nemo_polar.serving`.

    GET /                                   the page (static/index.html; static/ holds its JS and CSS)
    GET /api/info                           what is shown: the source, its kind, the tokenizer given
    GET /api/tasks                          tasks and their sessions (state, reward, masked and why,
                                            stage timings, rollup), with the source's version
    GET /api/sessions/{id}                  one session: its calls, rollup, chain tree, traces
    GET /api/sessions/{id}/calls/{record}   one call's native request and answer
    GET /api/sessions/{id}/traces/{i}       one trace's tokens: ids (and text), mask kind, logprobs
    GET /api/events                         server-sent `version` events whenever the source changed

Errors have the project's one body (`nemo_polar.control.error_body`). The server binds to loopback
unless told otherwise: it shows everything the run recorded.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..control import error_response, http_error
from ..errors import NotFound, PolarError
from ..serving import ServerThread, free_port, json_response, run
from . import tokens
from .session import SessionView
from .sources import Source

STATIC = Path(__file__).parent / "static"
POLL_S = 1.0  # how often the change feed asks the source for its version
KEEPALIVE_S = 15.0
LIVE_REUSE_S = 2.0  # a session still running is read again after this long


def _answers(handler: Callable[[ViewServer, Request], Awaitable[Response]]):
    @functools.wraps(handler)
    async def wrapped(self: ViewServer, request: Request) -> Response:
        try:
            return await handler(self, request)
        except PolarError as err:
            return error_response(err)

    return wrapped


class ViewServer:
    """The routes over one source; `app` is the ASGI app. `tokenizer`: a folder, else found per session."""

    def __init__(self, source: Source, tokenizer: str | None = None, poll_s: float = POLL_S):
        self.source = source
        self.tokenizer = tokenizer
        self.poll_s = poll_s
        self._views: OrderedDict[str, tuple[float, SessionView]] = OrderedDict()
        self.app = Starlette(
            routes=[
                Route("/", self.index, methods=["GET"]),
                Route("/api/info", self.info, methods=["GET"]),
                Route("/api/tasks", self.tasks, methods=["GET"]),
                Route("/api/sessions/{sid}", self.session, methods=["GET"]),
                Route("/api/sessions/{sid}/calls/{rid}", self.call, methods=["GET"]),
                Route("/api/sessions/{sid}/traces/{index:int}", self.trace, methods=["GET"]),
                Route("/api/events", self.events, methods=["GET"]),
                Mount("/static", StaticFiles(directory=STATIC), name="static"),
            ],
            lifespan=self._lifespan,
            exception_handlers={HTTPException: http_error},
        )

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        await self.source.close()

    async def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    @_answers
    async def info(self, request: Request) -> Response:
        return json_response({"source": self.source.label, "kind": self.source.kind, "tokenizer": self.tokenizer})

    @_answers
    async def tasks(self, request: Request) -> Response:
        version = await self.source.version()  # before the listing: a change while listing is seen again
        return json_response({"tasks": await self.source.listing(), "version": version})

    @_answers
    async def session(self, request: Request) -> Response:
        view = await self._view(request.path_params["sid"])
        return json_response(await asyncio.to_thread(view.detail))

    @_answers
    async def call(self, request: Request) -> Response:
        view = await self._view(request.path_params["sid"])
        body = view.call(request.path_params["rid"])
        if body is None:
            raise NotFound(f"no call {request.path_params['rid']!r} in session {request.path_params['sid']!r}")
        return json_response(body)

    @_answers
    async def trace(self, request: Request) -> Response:
        sid, index = request.path_params["sid"], request.path_params["index"]
        view = await self._view(sid)
        vocab = tokens.find(self.tokenizer or self.source.model_dir, {r.upstream.model for r in view.records})
        body = await asyncio.to_thread(view.trace, index, vocab)
        if body is None:
            raise NotFound(f"session {sid!r} has no trace {index}")
        return json_response(body)

    async def _view(self, sid: str) -> SessionView:
        """A session's view, kept for the next request (its traces follow its detail); a live one is
        read again once it is a little old."""
        kept = self._views.get(sid)
        if kept is not None and (kept[1].final or time.monotonic() - kept[0] < LIVE_REUSE_S):
            self._views.move_to_end(sid)
            return kept[1]
        row, records = await self.source.session(sid)
        view = await asyncio.to_thread(SessionView.of, row, records)
        self._views[sid] = (time.monotonic(), view)
        while len(self._views) > 16:
            self._views.popitem(last=False)
        return view

    async def events(self, request: Request) -> Response:
        async def gen() -> AsyncIterator[bytes]:
            yield b": connected\n\n"
            last, quiet = None, 0.0
            while True:
                try:
                    version = await self.source.version()
                except PolarError as exc:  # the source is away for now: say so, keep asking
                    yield b"event: trouble\ndata: " + orjson.dumps({"message": exc.message}) + b"\n\n"
                    version = last
                if version != last:
                    last, quiet = version, 0.0
                    yield b"event: version\ndata: " + orjson.dumps({"version": version}) + b"\n\n"
                elif quiet >= KEEPALIVE_S:
                    quiet = 0.0
                    yield b": keep-alive\n\n"
                await asyncio.sleep(self.poll_s)
                quiet += self.poll_s

        return StreamingResponse(gen(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def serve(source: Source, host: str, port: int, tokenizer: str | None = None) -> None:
    """`polar view`: in the foreground until interrupted."""
    print(f"polar view: {source.label} ({source.kind}) on http://{host}:{port}", flush=True)
    run(ViewServer(source, tokenizer).app, host, port)


class ViewThread(ServerThread):
    """The page's server on a thread of this process (tests, `polar bench view`)."""

    def __init__(self, source: Source, tokenizer: str | None = None, host: str = "127.0.0.1", port: int = 0):
        self.server = ViewServer(source, tokenizer)
        super().__init__(self.server.app, host, port or free_port(host), "polar-view")

    def __enter__(self) -> ViewThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(10)


__all__ = ["ViewServer", "ViewThread", "serve"]
