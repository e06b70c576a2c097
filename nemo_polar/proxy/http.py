"""The proxy's HTTP/1.1 client to inference servers: keep-alive connections and httptools' parser.

aiohttp's client cost about 0.4 ms of CPU per streamed call (a third of the proxy's): a request
object, a response object and a Python stream reader per call, Python work per body chunk. An
inference server's answers need much less: a JSON body out; back, a status and a body framed by
Content-Length, chunked encoding or the connection's end, which httptools (uvicorn's parser)
decodes in C. Of the answer's headers only the status and the body's framing are read. A call has
one deadline for everything: connecting, the answer, its body.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

import httptools

_HIGH_WATER = 1 << 20  # body bytes waiting for their reader before the socket is paused
_LINGER_S = 1.0  # how long a connection waits for its answer's last bytes after the reader is done


class BrokenOff(ConnectionError):
    """The server closed the connection, or sent something that is not HTTP, before the end."""


class Client:
    def __init__(self, connect_timeout_s: float):
        self.connect_timeout_s = connect_timeout_s
        self.idle: dict[tuple[str, str, int], list[_Connection]] = defaultdict(list)
        self._tls: ssl.SSLContext | None = None

    async def request(self, method: str, url: str, body: bytes | None, timeout_s: float) -> Response:
        """Sends a call and waits for its status; the body is then read from the response, which
        must be released. Raises TimeoutError past the deadline, OSError when the server cannot be
        reached or breaks off."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        key, head = _route(method, url)
        if body is not None:
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        message = [head + b"\r\n", body or b""]
        while True:
            conn, reused = await self._connection(key, deadline)
            response = Response(self, conn, key, deadline)
            conn.transport.writelines(message)  # type: ignore[union-attr]
            try:
                await response.started()
                return response
            except BrokenOff:
                response.release()
                if not reused or response.received:
                    raise
                # a kept-alive connection the server closed just as it was reused: once more, anew
            except BaseException:
                response.release()
                raise

    async def _connection(self, key: tuple[str, str, int], deadline: float) -> tuple[_Connection, bool]:
        idle = self.idle[key]
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn, True
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        timeout = min(self.connect_timeout_s, deadline - loop.time())
        tls = self._context() if scheme == "https" else None
        _, conn = await asyncio.wait_for(loop.create_connection(_Connection, host, port, ssl=tls), timeout)
        return conn, False

    def _context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    def close(self) -> None:
        for conns in self.idle.values():
            for conn in conns:
                conn.close()
        self.idle.clear()


@functools.lru_cache(maxsize=256)
def _route(method: str, url: str) -> tuple[tuple[str, str, int], bytes]:
    """The pool key and the head's first lines of a call (a proxy calls a few URLs, many times)."""
    u = urlsplit(url)
    key = (u.scheme, u.hostname or "", u.port or (443 if u.scheme == "https" else 80))
    target = (u.path or "/") + (f"?{u.query}" if u.query else "")
    return key, f"{method} {target} HTTP/1.1\r\nHost: {u.netloc.rpartition('@')[2]}\r\n".encode("latin-1")


class Response:
    """One call's answer. `chunks()` or `read()` give its body; `release()` hands the connection
    back for the next call (or closes it, if this answer did not end cleanly)."""

    def __init__(self, client: Client, conn: _Connection, key: tuple[str, str, int], deadline: float):
        self.client, self.conn, self.key = client, conn, key
        self.loop = asyncio.get_running_loop()
        self.status = 0
        self.framed = False  # the body's end is marked (Content-Length, chunked), not the connection's end
        self.received = False
        self.pieces: list[bytes] = []
        self.buffered = 0
        self.done = False
        self.keep_alive = False
        self.error: BaseException | None = None
        self.read_all = False  # the reader has all it wants: what may follow is the body's framing
        self.released = False
        self.waiter: asyncio.Future[None] | None = None
        self.before_wait: Callable[[], None] | None = None  # called once, the first time a read must wait
        self.timer = self.loop.call_at(deadline, self._fail, TimeoutError("no complete answer before the deadline"))
        conn.response = self

    async def started(self) -> None:
        while not self.status:
            await self._next()

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives: all that came since the last step, in one piece."""
        while True:
            if self.pieces:
                data = self.pieces[0] if len(self.pieces) == 1 else b"".join(self.pieces)
                self.pieces = []
                if self.buffered > _HIGH_WATER and not self.conn.closed:
                    self.conn.transport.resume_reading()  # type: ignore[union-attr]
                self.buffered = 0
                yield data
            elif self.done:
                return
            else:
                await self._next()

    async def read(self) -> bytes:
        return b"".join([data async for data in self.chunks()])

    def finished_reading(self) -> None:
        """The reader has all it wants (a stream's last event), which can be a moment ahead of the
        body's end: on release, the connection waits that moment instead of being closed."""
        self.read_all = True

    def release(self) -> None:
        """Idempotent. Closes the connection if the answer did not end (cleanly, or in a moment)."""
        if self.released:
            return
        self.released = True
        self.timer.cancel()
        if self.read_all and not (self.done or self.error is not None or self.conn.closed):
            self.timer = self.loop.call_later(_LINGER_S, self._settle)
        else:
            self._settle()

    async def _next(self) -> None:
        """Until the connection or the deadline has news."""
        if self.before_wait is not None:
            hook, self.before_wait = self.before_wait, None
            hook()
        if self.error is None:
            self.waiter = self.loop.create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        if self.error is not None:
            raise self.error

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _fail(self, error: BaseException) -> None:
        if self.error is None and not self.done:
            self.error = error
            self._wake()
            if self.released:
                self._settle()

    def _settle(self) -> None:
        conn = self.conn
        if conn.response is not self:
            return
        conn.response = None
        self.timer.cancel()
        if self.done and self.keep_alive and self.error is None and not conn.closed:
            self.client.idle[self.key].append(conn)
        else:
            conn.close()

    # from the connection's parser
    def _arrived(self, size: int) -> None:
        """After each read (whose body pieces the parser has appended: one per HTTP chunk)."""
        self.buffered += size
        if self.buffered > _HIGH_WATER and not self.released:
            self.conn.transport.pause_reading()  # type: ignore[union-attr]
        self._wake()

    def _complete(self, keep_alive: bool) -> None:
        self.done, self.keep_alive = True, keep_alive
        if self.released:
            self._settle()
        else:
            self._wake()

    def _lost(self) -> None:
        if self.done:
            return
        if self.status and not self.framed:  # a body that runs to the connection's end has ended
            self._complete(False)
        else:
            where = "mid-answer" if self.status else "before answering"
            self._fail(BrokenOff(f"the server closed the connection {where}"))


class _Connection(asyncio.Protocol):
    """One kept-alive connection, one call at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: Response | None = None
        self.closed = False

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.response is not None:
            self.response._lost()

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None:  # nothing was asked: not a server to keep talking to
            self.close()
            return
        response.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            response._fail(BrokenOff(f"the server's answer is not HTTP: {exc}"))
            self.close()
            return
        response._arrived(len(data))  # one wake-up per read, however many chunks it held

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.response.framed = True  # type: ignore[union-attr]

    def on_headers_complete(self) -> None:
        response = self.response
        response.status = self.parser.get_status_code()  # type: ignore[union-attr]
        response._wake()  # type: ignore[union-attr]

    def on_body(self, body: bytes) -> None:
        self.response.pieces.append(body)  # type: ignore[union-attr]

    def on_message_complete(self) -> None:
        self.response._complete(self.parser.should_keep_alive())  # type: ignore[union-attr]
