"""The proxy's HTTP client against servers that answer byte for byte as scripted: body framings,
kept-alive connections, servers that close them, deadlines, and answers that are not HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from nemo_polar.proxy.http import BrokenOff, Client

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(script: Script) -> tuple[asyncio.Server, str, list[int]]:
    """A server running `script` on each connection; the list counts connections."""
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await script(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", connections


async def _request_body(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0
    )
    return await reader.readexactly(length)


def _chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


async def _keep_answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        try:
            body = await _request_body(reader)
        except asyncio.IncompleteReadError:
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()


def run(coro):
    return asyncio.run(coro)


def test_bodies_framed_by_length_chunks_or_the_connection_end():
    async def main():
        answers = [
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(b"he", b"llo"),
            b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello",
        ]
        for answer in answers:

            async def script(reader, writer, answer=answer):
                await _request_body(reader)
                writer.write(answer)
                await writer.drain()

            server, url, _ = await _serve(script)
            client = Client(connect_timeout_s=5)
            response = await client.request("POST", url + "/v1/x", b"{}", timeout_s=5)
            assert (response.status, await response.read()) == (200, b"hello")
            response.release()
            client.close()
            server.close()

    run(main())


def test_a_connection_is_kept_for_the_next_call_and_sends_the_body():
    async def main():
        server, url, connections = await _serve(_keep_answering)
        client = Client(connect_timeout_s=5)
        for body in (b'{"a": 1}', b'{"b": 2}', b"[]"):
            response = await client.request("POST", url + "/v1/chat/completions", body, timeout_s=5)
            assert await response.read() == body
            response.release()
        assert len(connections) == 1
        client.close()
        server.close()

    run(main())


def test_a_stream_read_to_its_last_event_keeps_its_connection_when_the_end_comes_later():
    async def main():
        async def script(reader, writer):
            for _ in range(2):
                await _request_body(reader)
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nevent\r\n")
                await writer.drain()
                await asyncio.sleep(0.1)
                writer.write(b"0\r\n\r\n")  # the body's end, after the reader had what it wanted
                await writer.drain()

        server, url, connections = await _serve(script)
        client = Client(connect_timeout_s=5)
        for _ in range(2):
            response = await client.request("POST", url + "/s", b"{}", timeout_s=5)
            async for data in response.chunks():
                assert data == b"event"
                break
            response.finished_reading()
            response.release()
            await asyncio.sleep(0.3)
        assert len(connections) == 1
        client.close()
        server.close()

    run(main())


def test_a_reader_that_stops_early_closes_the_connection():
    async def main():
        closed = asyncio.Event()

        async def script(reader, writer):
            await _request_body(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
            await writer.drain()
            assert await reader.read() == b""  # the client hung up: a generation would stop here
            closed.set()

        server, url, _ = await _serve(script)
        client = Client(connect_timeout_s=5)
        response = await client.request("POST", url + "/s", b"{}", timeout_s=5)
        async for _ in response.chunks():
            break
        response.release()
        await asyncio.wait_for(closed.wait(), 0.5)  # at once, not after a linger
        client.close()
        server.close()

    run(main())


def test_a_kept_connection_the_server_closed_is_replaced_once():
    async def main():
        async def one_answer_then_close(reader, writer):
            await _request_body(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            await reader.read(1)  # the next request's first byte: hang up without answering

        server, url, connections = await _serve(one_answer_then_close)
        client = Client(connect_timeout_s=5)
        for _ in range(2):
            response = await client.request("POST", url + "/x", b"{}", timeout_s=5)
            assert await response.read() == b"ok"
            response.release()
        assert len(connections) == 2
        client.close()
        server.close()

    run(main())


def test_failures_are_os_errors_or_timeouts():
    async def main():
        async def hang(reader, writer):
            await asyncio.sleep(10)

        async def cut(reader, writer):
            await _request_body(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
            await writer.drain()

        async def garbage(reader, writer):
            await _request_body(reader)
            writer.write(b"SMTP ready\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(1)

        client = Client(connect_timeout_s=5)
        server, url, _ = await _serve(hang)
        with pytest.raises(TimeoutError):
            await client.request("POST", url + "/x", b"{}", timeout_s=0.2)
        server.close()

        server, url, _ = await _serve(cut)
        response = await client.request("POST", url + "/x", b"{}", timeout_s=5)
        with pytest.raises(BrokenOff, match="mid-answer"):
            await response.read()
        response.release()
        server.close()

        server, url, _ = await _serve(garbage)
        with pytest.raises(BrokenOff, match="not HTTP"):
            await client.request("POST", url + "/x", b"{}", timeout_s=5)
        server.close()

        port = url.rsplit(":", 1)[1]
        await server.wait_closed()
        with pytest.raises(OSError):  # refused
            await client.request("GET", f"http://127.0.0.1:{port}/v1/models", None, timeout_s=5)
        client.close()

    run(main())
