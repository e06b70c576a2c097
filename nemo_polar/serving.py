"""Running any of the project's ASGI apps: one uvicorn set-up, in the foreground or on a thread."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
from typing import Any

import orjson
import uvicorn
from starlette.responses import Response


def json_response(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server(app: Any, host: str, port: int) -> uvicorn.Server:
    return uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            loop="uvloop",
            http="httptools",
            interface="asgi3",  # every app here is; the proxy's is a method, which detection takes for ASGI2
            proxy_headers=False,  # nothing reads the client's address: a middleware less on every call
            timeout_keep_alive=75,
            backlog=4096,
        )
    )


def run(app: Any, host: str, port: int) -> None:
    """Serve `app` in the foreground: this process is its server, until interrupted."""
    _settle_heap()
    server(app, host, port).run()


def _settle_heap() -> None:
    """A busy server allocates hundreds of objects per call (parsed chunks, events, futures). With
    Python's default thresholds the cyclic collector ran several times per call and its older
    generations re-scanned the whole long-lived heap (modules, schemas, the app): 29% of the proxy's
    CPU at 256 streamed calls in flight. What exists at start-up is frozen out of collection, and the
    young generation is collected after 50,000 net allocations instead of 700: cycles are still
    freed, a few MB later."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 10)


class ServerThread:
    """An app served for real on a thread of this process (tests, benchmarks, `polar up`)."""

    def __init__(self, app: Any, host: str, port: int, name: str = "polar-server"):
        self.uvicorn = server(app, host, port)
        self.url = f"http://{host}:{port}"
        self.name = name
        self._thread = threading.Thread(target=lambda: asyncio.run(self.uvicorn.serve()), name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()
        while not self.uvicorn.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"{self.name} failed to start")
            time.sleep(0.01)

    def stop(self, timeout_s: float = 60) -> None:
        self.uvicorn.should_exit = True
        self._thread.join(timeout_s)
