"""What a gateway node needs of its proxy, and nothing more: `ProxySurface`.

The node opens one proxy session per rollout session (its key is the harness's API key), closes it
when the rollout session is final (the key is refused from then on; the records stay readable through
the proxy's admin routes), reads its records back for the traces, holds RUN starts while the proxy's
gate is paused, and serves the proxy's app on its own port.

`nemo_polar.proxy.app.Proxy` is one; the gateway touches nothing of the proxy beyond it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from starlette.types import ASGIApp

from ...records import CompletionRecord, Session


class ProxySurface(Protocol):
    @property
    def app(self) -> ASGIApp: ...

    @property
    def control_token(self) -> str | None: ...

    @property
    def recording(self) -> bool:
        """Calls are being recorded (the store's writer is alive and writing): a node that cannot record
        gets no new sessions."""

    def open_session(
        self,
        *,
        metadata: dict[str, Any],
        upstream_url: str | None = None,
        upstream_model: str | None = None,
        max_tokens: int | None = None,
        max_calls: int | None = None,
        max_sampled: int | None = None,
    ) -> Session:
        """A capture session whose key the harness uses; its calls go to `upstream_url` when set, each capped at
        `max_tokens`; once it has made `max_calls` calls or sampled `max_sampled` tokens, every call is refused."""

    def budget_spent(self, session_id: str) -> str | None:
        """Why the session's calls are refused for its budget; None while it has some left."""

    def close_session(self, session_id: str) -> None:
        """The session is final: its key is refused from now on (401); its records stay readable."""

    def records(self, session_id: str) -> list[CompletionRecord]:
        """Every call of the session recorded so far, the queued ones included."""

    def on_pause(self, listener: Callable[[bool], None]) -> None:
        """`listener(True)` when generation is paused for a weight update, `listener(False)` on resume."""

    async def aclose(self) -> None:
        """Close the upstream connections (the node serves the proxy's app, so its lifespan never runs)."""

    def close(self) -> None:
        """Close the record store."""

    def metric_registries(self) -> list[Any]:
        """The proxy's Prometheus registries, shown at the node's `/metrics` beside the node's own."""
