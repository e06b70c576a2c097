"""A streamed call's forward, assemble, record and render steps: the upstream's chunks relayed to the
harness as its dialect's events while they are assembled into the call's completion, recorded once.
The relay holds the call's place at the gate (`gate.Hold`) and releases it when it closes."""

from __future__ import annotations

import asyncio
import logging
import time

from starlette.responses import Response, StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from ..chat import Completion
from ..errors import PolarError
from .backends.base import Backend
from .call import Call
from .gate import Hold
from .http import Response as UpstreamResponse
from .recorder import Recorder
from .render import SSE_HEADERS
from .upstream import Upstream

log = logging.getLogger("nemo_polar.proxy")

WATCH_AFTER_S = 0.05  # how long a relay waits for the upstream before it watches for the harness leaving
_SSE_RAW_HEADERS = StreamingResponse((), media_type="text/event-stream", headers=SSE_HEADERS).raw_headers


class Relay:
    """Relays one upstream stream to the harness as its dialect's events, and records it once."""

    def __init__(
        self,
        upstream: Upstream,
        backend: Backend,
        recorder: Recorder,
        call: Call,
        response: UpstreamResponse,
        hold: Hold,
    ):
        self.backend, self.recorder = backend, recorder
        self.call, self.response, self.hold = call, response, hold
        self.chunks = upstream.events(response)
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
        call = self.call
        renderer = call.dialect.stream_renderer(call.request)
        assembler = self.backend.stream_parser()
        out: list[bytes] = []
        committed: asyncio.Future[None] | None = None
        try:
            async for batch, done in self.chunks:
                for delta in assembler.feed_all(batch):  # a read's pieces as one event of each kind
                    out += renderer.delta(delta)
                if out and call.first_token_at is None:
                    call.first_token_at = time.time()
                if done:
                    call.answered()
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
        self.recorder.sessions.took(call)

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
        recorder = self.recorder
        if self.completion is not None:
            return recorder.record(self.call, self.completion)
        if self.failure is not None:
            return recorder.record(self.call, None, self.failure)
        return recorder.record(
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
            self.hold.release()


class RelayResponse(Response):
    """The relay as a response: stops it when the harness goes away, and closes it even if it never
    ran. One watcher task does what Starlette's per-response anyio task group would, for less, and
    only once the relay has waited `WATCH_AFTER_S` for the upstream: only a relay that waits can be
    interrupted, a harness that leaves is seen that much later at most (a generation it stops takes
    seconds), and the short calls that end sooner, most of them, pay for a timer instead of a task."""

    def __init__(self, relay: Relay):  # the headers are every relay's: built once, above
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

        def watch_soon() -> None:
            nonlocal timer
            timer = asyncio.get_running_loop().call_later(WATCH_AFTER_S, watch_from_now)

        timer: asyncio.TimerHandle | None = None
        self.relay.response.before_wait = watch_soon
        try:
            start = {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            await self.relay.stream(send, start)
        except asyncio.CancelledError:
            if not gone:
                raise
            relaying.uncancel()  # the harness left: the relay records that, nothing else to do
        finally:
            # no await since the last send: the watcher, woken by the response completing, never ran
            if timer is not None:
                timer.cancel()
            if watcher is not None:
                watcher.cancel()
            self.relay.close()
