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
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


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
            http=_Protocol,
            interface="asgi3",  # every app here is; the proxy's is a method, which detection takes for ASGI2
            proxy_headers=False,  # nothing reads the client's address: a middleware less on every call
            timeout_keep_alive=75,
            backlog=4096,
        )
    )


class _HeadWithBody:
    """A connection's transport on which a response's head waits for its body's first bytes, so
    that both go out in one write. uvicorn writes the head (`http.response.start`) and each body
    piece apart: two send() calls and two packets where one does. A head no body follows goes out
    on the loop's next turn; `100 Continue` is never held (the client waits for it to send the body)."""

    __slots__ = ("_transport", "_held", "_loop")

    def __init__(self, transport: asyncio.Transport):
        self._transport = transport
        self._held: bytes | None = None
        self._loop = asyncio.get_running_loop()  # once per connection: each look-up is a getpid()

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.writelines((held, data))
        elif data[:5] == b"HTTP/" and data[-4:] == b"\r\n\r\n" and data[9:12] != b"100":
            self._held = data
            self._loop.call_soon(self._flush)
        else:
            self._transport.write(data)

    def _flush(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:  # the rest is the transport's own
        return getattr(self._transport, name)


# uvicorn stops reading a request once 64 KB of its body wait for the app, and reads on when the app asks:
# a long agent session's 475 KB body came in over several turns of the loop (0.30 ms, 0.15 ms read on). The app
# reads every body whole anyway (within `limits.max_body_bytes`), so reading on costs no memory it would not.
httptools_impl.HIGH_WATER_LIMIT = 4 << 20


class _Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, on a transport that writes a head with its body."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_HeadWithBody(transport))  # type: ignore[arg-type]


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
