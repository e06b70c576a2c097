"""Running the proxy: in the foreground (`polar proxy`) or on a background thread (tests, bench)."""

from __future__ import annotations

import logging

from ..config import ProxyConfig
from ..serving import ServerThread, free_port, run
from .app import Proxy

__all__ = ["ProxyThread", "free_port", "serve"]


def serve(config: ProxyConfig) -> None:
    logging.getLogger("nemo_polar").setLevel(config.log_level.upper())
    proxy = Proxy(config)
    try:
        print(
            f"polar proxy on http://{config.host}:{config.port} -> {config.upstream.engine} {config.upstream.url}",
            flush=True,
        )
        run(proxy.app, config.host, config.port)
    finally:
        proxy.store.close()


class ProxyThread(ServerThread):
    """A real proxy server on a thread of this process, for tests and benchmarks."""

    def __init__(self, config: ProxyConfig):
        if config.port == 0:
            config = config.model_copy(update={"port": free_port()})
        self.proxy = Proxy(config)
        super().__init__(self.proxy.app, config.host, config.port, "polar-proxy")

    def __enter__(self) -> ProxyThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(10)
        self.proxy.store.close()
