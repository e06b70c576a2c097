"""The proxy's `/admin` routes, each guarded by the control token when there is one: capture sessions
and their records, and the generation gate (pause and resume around a weight update). A gateway node
reads a session's records in-process, through the same `records`."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..config import ProxyConfig
from ..control import error_response as control_error
from ..control import query_float, route
from ..errors import PolarError, RequestInvalid, problems
from ..records import CompletionRecord
from ..serving import json_response
from ..store import SqliteStore
from .gate import GenerationGate
from .history import loads
from .pipeline import read_body
from .sessions import Sessions
from .targets import Targets


class SessionOpening(BaseModel):
    """`POST /admin/sessions`: a capture session, optionally with its own inference server."""

    model_config = ConfigDict(extra="forbid")

    metadata: dict[str, Any] = Field(default_factory=dict)
    upstream_url: str | None = None
    upstream_model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_calls: int | None = Field(None, ge=1)
    max_sampled: int | None = Field(None, ge=1)


class Admin:
    def __init__(
        self, config: ProxyConfig, store: SqliteStore, sessions: Sessions, gate: GenerationGate, targets: Targets
    ):
        self.config, self.store, self.sessions, self.gate, self.targets = config, store, sessions, gate, targets

    @property
    def control_token(self) -> str | None:
        return self.config.control_token

    def routes(self) -> list[Route]:
        return [
            Route("/admin/sessions", self.route_open, methods=["POST"]),
            Route("/admin/sessions/{session_id}/close", self.route_close, methods=["POST"]),
            Route("/admin/sessions/{session_id}/completions", self.route_records, methods=["GET"]),
            Route("/admin/inference/status", self.gate_status, methods=["GET"]),
            Route("/admin/inference/pause", self.pause, methods=["POST"]),
            Route("/admin/inference/resume", self.resume, methods=["POST"]),
        ]

    # --- what a gateway node reads too ---------------------------------------------------------
    def records(self, session_id: str) -> list[CompletionRecord]:
        """Every call of the session recorded so far, the queued ones included (waits for the writer;
        raises when it cannot, so a session is never built from part of its calls)."""
        if not self.store.flush(self.config.store.flush_timeout_s):
            raise PolarError(f"records of session {session_id} not written: {self.store.problem or 'writer stopped'}")
        return self.store.records(session_id)

    # --- the routes ------------------------------------------------------------------------------
    @route(guarded=True)
    async def route_open(self, request: Request) -> Response:
        raw = await read_body(request, self.config.limits.max_body_bytes)
        try:
            opening = SessionOpening.model_validate(loads(raw) if raw else {})
        except ValidationError as exc:
            raise RequestInvalid("; ".join(problems(exc))) from None
        session = self.sessions.open(**opening.model_dump())
        return json_response({"session_id": session.id, "api_key": session.api_key}, 201)

    @route(guarded=True)
    async def route_close(self, request: Request) -> Response:
        await asyncio.to_thread(self.sessions.close, request.path_params["session_id"])
        return json_response({"closed": True})

    @route(guarded=True)
    async def route_records(self, request: Request) -> Response:
        records = await asyncio.to_thread(self.records, request.path_params["session_id"])
        return json_response({"data": [r.model_dump() for r in records]})

    @route(guarded=True)
    async def gate_status(self, request: Request) -> Response:
        info = self.targets.info
        return json_response(self.gate.status() | {"engine": info.engine, "url": info.url})

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
            self.targets.set_policy_version(version)
        self.gate.resume()
        return json_response(self.gate.status() | {"policy_version": self.targets.info.policy_version})
