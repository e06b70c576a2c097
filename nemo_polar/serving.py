"""Running any of the project's ASGI apps: one uvicorn set-up, in the foreground or on a thread."""

from __future__ import annotations

import asyncio
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
            timeout_keep_alive=75,
            backlog=4096,
        )
    )


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
