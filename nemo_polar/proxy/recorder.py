"""The record step: a call's outcome as a `CompletionRecord`, queued to the store, with its metrics.

A long call's bodies are encoded while the upstream generates (`prepare_soon`); the record itself is
committed before the answer's last byte goes out (`store.durable`), so a proxy killed at any moment
has a record of every answer a harness received in full.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from ..chat import Completion
from ..errors import PolarError
from ..metrics import ProxyMetrics
from ..records import CompletionRecord, UpstreamInfo
from ..store import SqliteStore
from .backends.base import Backend
from .call import Call
from .sessions import Sessions
from .targets import Targets

PREPARE_FROM = 16384  # bytes of body: a shorter call's bodies are encoded with its record, if at all


class Recorder:
    def __init__(
        self,
        store: SqliteStore,
        sessions: Sessions,
        backend: Backend,
        metrics: ProxyMetrics,
        targets: Targets,
        durable: bool,
    ):
        self.store, self.sessions, self.backend = store, sessions, backend
        self.metrics, self.targets, self.durable = metrics, targets, durable

    def prepare_soon(self, call: Call) -> None:
        """A long call's bodies are encoded once its request is on its way, while it waits."""
        if len(call.raw) >= PREPARE_FROM:
            asyncio.get_running_loop().call_soon(call.prepare, self.store)

    def record(
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
            self.sessions.sampled(call.session.id, c)
        self.sessions.budgets.settle(call, len(c.completion_token_ids) if c else 0)
        finished = time.time()
        status = status or (err.kind if err else "ok")
        self.metrics.call(
            call.dialect.name,
            status,
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
            upstream=_served_by(call.target or self.targets.info, c),
            status=status,
            error=error or (err.message if err else None),
        )
        stored = call.stored
        base = self.sessions.prompt_ids.extends(call.session.id, c.prompt_token_ids) if c and stored else None
        if base is not None:
            stored = dataclasses.replace(stored, prompt_base=base)
        if wait and self.durable:
            return self.store.durable(record, stored)
        self.store.add_record(record, bodies=stored)
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def _served_by(target: UpstreamInfo, c: Completion | None) -> UpstreamInfo:
    """The policy version the server reported for this call wins over the one the operator set."""
    if c is None or c.policy_version is None or c.policy_version == target.policy_version:
        return target
    return target.model_copy(update={"policy_version": c.policy_version})
