"""The one uvicorn set-up: uvicorn's own httptools protocol, on a transport that writes a response's
head together with its first body bytes. The wire below records each write the protocol makes."""

from __future__ import annotations

import asyncio

import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route
from uvicorn.server import ServerState

from nemo_polar.serving import _Protocol


class Wire:
    """The socket side of a connection: every write, as it would reach send()."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def writelines(self, parts) -> None:
        self.writes.append(b"".join(parts))

    def get_extra_info(self, name: str, default=None):
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


def connect(app) -> tuple[asyncio.Protocol, Wire]:
    """uvicorn's protocol as `serving` configures it, on a new connection (call from the loop)."""
    config = uvicorn.Config(app, http=_Protocol, interface="asgi3", lifespan="off", log_level="warning")
    config.load()
    protocol = config.http_protocol_class(config=config, server_state=ServerState(), app_state={})
    wire = Wire()
    protocol.connection_made(wire)
    return protocol, wire


async def writes_once(wire: Wire, count: int) -> list[bytes]:
    for _ in range(200):
        if len(wire.writes) >= count:
            break
        await asyncio.sleep(0.005)
    return wire.writes


def serve(app, request: bytes, count: int) -> list[bytes]:
    """Feed one request to the protocol; its writes, once there are `count` (or after a second)."""

    async def go() -> list[bytes]:
        protocol, wire = connect(app)
        protocol.data_received(request)
        await writes_once(wire, count)
        await asyncio.sleep(0.02)  # and any write that would follow
        protocol.connection_lost(None)
        return wire.writes

    return asyncio.run(go())


def test_a_response_head_goes_out_with_its_body_in_one_write():
    app = Starlette(routes=[Route("/", lambda r: PlainTextResponse("hello"))])
    writes = serve(app, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 1)
    assert len(writes) == 1
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and writes[0].endswith(b"\r\n\r\nhello")


def test_a_head_whose_body_is_not_ready_is_not_held_back():
    """A stream that starts before its first event: the client sees the head at once, and each
    event when it comes."""
    release = asyncio.Event()

    async def later():
        await release.wait()
        yield b"data: 1\n\n"

    async def route(request):
        asyncio.get_running_loop().call_later(0.05, release.set)
        return StreamingResponse(later(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/", route)])
    writes = serve(app, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 3)
    head, event, end = writes
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n")
    assert event == b"9\r\ndata: 1\n\n\r\n" and end == b"0\r\n\r\n"


def test_100_continue_is_written_alone_and_at_once():
    async def echo(request):
        return PlainTextResponse(await request.body())

    app = Starlette(routes=[Route("/", echo, methods=["POST"])])
    request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"

    async def go() -> list[bytes]:
        protocol, wire = connect(app)
        protocol.data_received(request)
        # the client waits for 100 Continue before it sends the body
        assert await writes_once(wire, 1) == [b"HTTP/1.1 100 Continue\r\n\r\n"]
        protocol.data_received(b"hi")
        await writes_once(wire, 2)
        await asyncio.sleep(0.02)
        protocol.connection_lost(None)
        return wire.writes

    writes = asyncio.run(go())
    assert len(writes) == 2 and writes[1].startswith(b"HTTP/1.1 200 OK\r\n") and writes[1].endswith(b"\r\n\r\nhi")
