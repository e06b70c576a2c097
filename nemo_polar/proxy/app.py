"""The proxy's HTTP surface: the ASGI app and its routes.

A harness's call goes to the call pipeline (`pipeline.py`), the route of every dialect's paths; the
`/admin` routes are `admin.py`; probes, the model list and unknown routes are answered here. A
gateway node uses the proxy through the methods at the end (`ProxySurface`).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Receive, Scope, Send

from ..config import ProxyConfig
from ..errors import PolarError, UnknownRoute
from ..metrics import ProxyMetrics, scrape
from ..records import CompletionRecord, Session, UpstreamInfo
from ..serving import json_response
from ..session_cache import SessionCache
from ..store import SqliteStore
from .admin import Admin
from .backends import BACKENDS
from .dialects import DIALECTS, guess_dialect
from .gate import GenerationGate
from .pipeline import CallPipeline
from .recorder import Recorder
from .render import error_response
from .sessions import Sessions
from .targets import Targets
from .upstream import Upstream

_MATCHED_PATHS = 1024


class Proxy:
    def __init__(self, config: ProxyConfig, store: SqliteStore | None = None):
        self.config = config
        cache_limit = config.limits.session_cache_bytes
        self.store = store or SqliteStore(config.store.path, cache=SessionCache(cache_limit))
        self.store.cache.limit = cache_limit  # a store given holds its sessions' last records under the same bound
        self.sessions = Sessions(self.store)
        up = config.upstream
        self.backend = BACKENDS[up.engine](up.sampling)
        self.upstream = Upstream(up.timeout_s, up.connect_timeout_s)
        self.metrics = ProxyMetrics(self.store.cache)
        self.gate = GenerationGate(config.pause_wait_s, self.metrics.upstream)
        self.targets = Targets(up)
        recorder = Recorder(self.store, self.sessions, self.backend, self.metrics, self.targets, config.store.durable)
        self.pipeline = CallPipeline(
            config.limits, self.sessions, self.backend, self.upstream, self.gate, self.targets, recorder
        )
        self.admin = Admin(config, self.store, self.sessions, self.gate, self.targets)
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

    @property
    def info(self) -> UpstreamInfo:
        """The configured inference server, with the policy version calls are recorded with."""
        return self.targets.info

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app. A harness's call goes straight to the pipeline; the rest (probes, admin,
        unknown routes, other methods) through Starlette, whose middleware and router walk cost a
        call more CPU than parsing its body."""
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
            *self.admin.routes(),
        ]
        for dialect in DIALECTS.values():
            for path, methods in dialect.routes:
                route = Route(path, functools.partial(self.pipeline.run, dialect), methods=methods)
                routes.append(route)
                if route.param_convertors:
                    self._patterned_calls.append(route)
                else:
                    self._calls[path] = route
        routes.append(Route("/{path:path}", self.unknown, methods=["GET", "POST", "PUT", "DELETE", "PATCH"]))
        return routes

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

    # --- what a gateway node uses (server/gateway/proxy_surface.ProxySurface) ---------------------
    def open_session(self, **opening: Any) -> Session:
        """A capture session (`metadata`, `upstream_url`, `upstream_model`, `max_tokens`, its budget's `max_calls`
        and `max_sampled`)."""
        return self.sessions.open(**opening)

    def budget_spent(self, session_id: str) -> str | None:
        return self.sessions.budgets.spent_why.get(session_id)

    def close_session(self, session_id: str) -> None:
        self.sessions.close(session_id)

    def records(self, session_id: str) -> list[CompletionRecord]:
        return self.admin.records(session_id)

    def on_pause(self, listener: Callable[[bool], None]) -> None:
        self.gate.listeners.append(listener)

    async def aclose(self) -> None:
        await self.upstream.close()

    def close(self) -> None:
        self.store.close()

    def metric_registries(self) -> list[Any]:
        return [self.metrics.registry]
