"""Running the proxy: in the foreground (`polar proxy`) or on a background thread (tests, bench)."""

from __future__ import annotations

import asyncio
import socket
import threading

import uvicorn

from ..config import ProxyConfig
from .app import Proxy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(proxy: Proxy) -> uvicorn.Server:
    cfg = proxy.config
    return uvicorn.Server(
        uvicorn.Config(
            proxy.app,
            host=cfg.host,
            port=cfg.port,
            log_level="warning",
            access_log=False,
            loop="uvloop",
            http="httptools",
            timeout_keep_alive=75,
            backlog=4096,
        )
    )


def serve(config: ProxyConfig) -> None:
    proxy = Proxy(config)
    try:
        print(
            f"polar proxy on http://{config.host}:{config.port} -> {config.upstream.engine} {config.upstream.url}",
            flush=True,
        )
        _server(proxy).run()
    finally:
        proxy.store.close()


class ProxyThread:
    """A real proxy server on a thread of this process, for tests and benchmarks."""

    def __init__(self, config: ProxyConfig):
        if config.port == 0:
            config = config.model_copy(update={"port": free_port()})
        self.proxy = Proxy(config)
        self.server = _server(self.proxy)
        self.url = f"http://{config.host}:{config.port}"
        self._thread = threading.Thread(target=self._run, name="polar-proxy", daemon=True)

    def _run(self) -> None:
        asyncio.run(self.server.serve())

    def __enter__(self) -> ProxyThread:
        self._thread.start()
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("proxy failed to start")
            threading.Event().wait(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(10)
        self.proxy.store.close()
