"""One harness call in flight: what the pipeline's steps, the recorder and the stream's relay share."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..chat import ChatRequest
from ..record_codec import Bodies
from ..records import Session, UpstreamInfo
from ..store import SqliteStore
from .backends.base import body_json
from .dialects import Dialect
from .ids import ordered_hex


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
    arrived: float = field(default_factory=time.monotonic)  # set to when the request reached the proxy
    asked: float | None = None  # when the inference server was asked (monotonic)
    upstream_s: float | None = None  # its own time: until its whole answer, or a stream's last chunk, was in
    stored: Bodies | None = None  # its bodies as the store keeps them, encoded while the upstream works
    budgeted: bool = False  # it holds a place in its session's budget until it is recorded (`budget.py`)
    held: int | None = None  # and the tokens it may sample

    def ask(self) -> None:
        """The inference server is asked now."""
        self.asked = time.monotonic()

    def answered(self) -> None:
        """Its whole answer, or a stream's last chunk, is in: the server's own time is known."""
        if self.asked is not None:
            self.upstream_s = time.monotonic() - self.asked

    def proxy_s(self) -> float | None:
        """The proxy's own time on the call so far: since the request arrived, the upstream's time left out."""
        return None if self.upstream_s is None else max(time.monotonic() - self.arrived - self.upstream_s, 0.0)

    def prepare(self, store: SqliteStore) -> None:
        """Encode the bodies for the record now, while the upstream generates: a long history is
        work the answer then need not wait for."""
        self.stored = store.prepare(self.session.id, self.id, self.native, self.upstream_body)

    def upstream_json(self) -> bytes:
        """The upstream body as sent: a long history's unchanged messages serialised once (`body_json`)."""
        assert self.upstream_body is not None, "targeted first"
        return body_json(self.upstream_body, self.request.messages)
