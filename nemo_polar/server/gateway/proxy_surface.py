"""What a gateway node needs of its proxy, and nothing more: `ProxySurface`.

The node opens one proxy session per rollout session (its key is the harness's API key), closes it
when the rollout session is final (the key is refused from then on; the records stay readable through
the proxy's admin routes), reads its records back for the traces, holds RUN starts while the proxy's
gate is paused, and serves the proxy's app on its own port.

`ProxyAdapter` gives today's `Proxy` that surface; it is the one place the gateway touches the
proxy's insides. Once `Proxy` has these methods itself (the edits are listed in the refactor's
notes), `surface()` returns the proxy as it is and the adapter goes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from starlette.types import ASGIApp

from ...proxy.app import Proxy
from ...records import CompletionRecord, Session

log = logging.getLogger("nemo_polar.gateway")


class ProxySurface(Protocol):
    @property
    def app(self) -> ASGIApp: ...

    @property
    def control_token(self) -> str | None: ...

    def open_session(
        self,
        *,
        metadata: dict[str, Any],
        upstream_url: str | None = None,
        upstream_model: str | None = None,
        max_tokens: int | None = None,
    ) -> Session:
        """A capture session whose key the harness uses; its calls go to `upstream_url` when set."""

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


class ProxyAdapter:
    """`ProxySurface` over today's `Proxy`."""

    def __init__(self, proxy: Proxy):
        self.proxy = proxy

    @property
    def app(self) -> ASGIApp:
        return self.proxy.app

    @property
    def control_token(self) -> str | None:
        return self.proxy.config.control_token

    def open_session(
        self,
        *,
        metadata: dict[str, Any],
        upstream_url: str | None = None,
        upstream_model: str | None = None,
        max_tokens: int | None = None,
    ) -> Session:
        return self.proxy.sessions.open(
            metadata=metadata, upstream_url=upstream_url, upstream_model=upstream_model, max_tokens=max_tokens
        )

    def close_session(self, session_id: str) -> None:
        close = getattr(self.proxy.sessions, "close", None)
        if close is None:  # until proxy/sessions.py refuses the keys of closed sessions (see the module doc)
            log.debug("this proxy cannot close session %s yet: its key stays valid", session_id)
            return
        close(session_id)

    def records(self, session_id: str) -> list[CompletionRecord]:
        self.proxy.store.flush()
        return self.proxy.store.records(session_id)

    def on_pause(self, listener: Callable[[bool], None]) -> None:
        self.proxy.gate.listeners.append(listener)

    async def aclose(self) -> None:
        await self.proxy.upstream.close()

    def close(self) -> None:
        self.proxy.store.close()

    def metric_registries(self) -> list[Any]:
        return [self.proxy.metrics.registry]


def surface(proxy: Proxy | ProxySurface) -> ProxySurface:
    """What the gateway holds: the proxy itself once it has the surface, else the adapter."""
    return ProxyAdapter(proxy) if isinstance(proxy, Proxy) else proxy
