"""Calls to the inference server (over `http.Client`), and the one place their failures become our errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from ..errors import (
    ContextOverflow,
    InvalidUpstream,
    PolarError,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from .http import Client, Response

_OVERFLOW_HINTS = ("maximum context length", "context length", "too long", "max_model_len", "exceeds the model")


def upstream_error(status: int, text: str) -> UpstreamError:
    """Map an upstream error answer to the most specific error, keeping its message."""
    try:
        data = orjson.loads(text)
        err = data.get("error", data) if isinstance(data, dict) else data
        message = err.get("message") or err.get("detail") or text if isinstance(err, dict) else str(err)
    except (orjson.JSONDecodeError, AttributeError):
        message = text
    message = str(message)[:2000] or f"HTTP {status}"
    if status == 400 and any(h in message.lower() for h in _OVERFLOW_HINTS):
        return ContextOverflow(message)
    if 400 <= status < 500:
        return UpstreamError(f"upstream rejected the request: {message}", status_code=status)
    return UpstreamError(f"upstream failed with HTTP {status}: {message}")


class Upstream:
    def __init__(self, timeout_s: float, connect_timeout_s: float):
        self.timeout_s = timeout_s  # one deadline per call: connecting, the answer and all its body
        self.http = Client(connect_timeout_s)
        self._served: dict[str, asyncio.Future[str]] = {}

    async def served_model(self, url: str) -> str:
        """The first model `url`'s `/v1/models` lists, asked once per server (concurrent askers share it)."""
        asked = self._served.get(url)
        if asked is None:
            asked = self._served[url] = asyncio.ensure_future(self._first_model(url))
        elif asked.done() and not asked.cancelled() and asked.exception() is None:
            return asked.result()  # every call after the first: no shield to build
        try:
            return await asyncio.shield(asked)
        except PolarError:
            self._served.pop(url, None)  # ask again next time: the server may have been starting
            raise

    async def _first_model(self, url: str) -> str:
        status, text = await self._call("GET", url + "/v1/models", None)
        if status >= 400:
            raise upstream_error(status, text.decode(errors="replace"))
        try:
            return str(orjson.loads(text)["data"][0]["id"])
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            raise InvalidUpstream(
                f"{url}/v1/models names no model ({text[:200]!r}): set upstream.model to the served name"
            ) from None

    async def close(self) -> None:
        self.http.close()

    async def post_json(self, url: str, body: bytes, parse: Callable[[bytes], Any] = orjson.loads) -> dict[str, Any]:
        """The answer to a call (its JSON `body`), parsed by `parse` (one that raises orjson's error on
        what is not JSON)."""
        status, text = await self._call("POST", url, body)
        if status >= 400:
            raise upstream_error(status, text.decode(errors="replace"))
        try:
            return parse(text)
        except orjson.JSONDecodeError:
            raise InvalidUpstream(f"upstream answered with invalid JSON: {text[:200]!r}") from None

    async def _call(self, method: str, url: str, body: bytes | None) -> tuple[int, bytes]:
        try:
            response = await self.http.request(method, url, body, self.timeout_s)
            try:
                return response.status, await response.read()
            finally:
                response.release()
        except OSError as exc:
            raise _failure(exc) from exc

    async def open_stream(self, url: str, body: bytes) -> Response:
        """Open a streaming call (read it with `events`, then release it); raises if the upstream
        refuses it."""
        try:
            response = await self.http.request("POST", url, body, self.timeout_s)
        except OSError as exc:
            raise _failure(exc) from exc
        if response.status >= 400:
            status, text = response.status, b""
            try:
                text = await response.read()
            except OSError:
                pass  # the status says enough
            finally:
                response.release()
            raise upstream_error(status, text.decode(errors="replace"))
        return response

    async def events(self, response: Response) -> AsyncIterator[tuple[list[dict[str, Any]], bool]]:
        """The stream's chunks, parsed, in batches: all that one read brought (one chunk when the
        upstream is slow, several when it or the proxy is busy), each with whether it is the last."""
        pending = bytearray()
        try:
            async for data in response.chunks():
                pending += data
                end = pending.rfind(b"\n") + 1
                if not end:
                    continue
                batch, done = _parse_block(pending[:end])
                del pending[:end]
                if done:
                    response.finished_reading()
                if batch or done:
                    yield batch, done
                if done:
                    return
        except OSError as exc:
            raise _failure(exc) from exc
        batch, done = _parse([pending])  # a last line without its newline
        yield batch, done
        if not done:
            raise UpstreamUnreachable("upstream closed the stream before it was complete")


def _failure(exc: OSError) -> UpstreamError:
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout(f"upstream did not answer in time ({exc})")
    return UpstreamUnreachable(f"upstream unreachable: {exc.__class__.__name__}: {exc}")  # refused, reset, cut


_JSON = {"Content-Type": "application/json"}


def _parse_block(block: bytearray) -> tuple[list[dict[str, Any]], bool]:
    """`_parse` of a block of whole lines. An inference server's stream is nothing but `data: ` events of one
    line each, and then the payloads are the block with each event's framing turned into a comma (a JSON value
    holds no raw newline): one replace instead of a walk over the lines, which cost as much as the parse."""
    if block.startswith(b"data: ") and block.endswith(b"\n\n"):
        payloads = block[6:-2].replace(b"\n\ndata: ", b",")
        if b"\n" not in payloads:  # every newline was an event's end: nothing but one-line `data: ` events
            events = (len(block) - 8 - len(payloads)) // 7 + 1  # each framing replaced is 7 bytes shorter
            done = payloads.endswith(b"[DONE]") and (events == 1 or payloads.endswith(b",[DONE]"))
            if done:
                events -= 1
                del payloads[-7 if events else -6 :]
            if not events:
                return [], done
            try:
                chunks = orjson.loads(b"[" + payloads + b"]")
                if len(chunks) == events:  # else a payload held a comma-separated list: not one chunk
                    return chunks, done
            except orjson.JSONDecodeError:
                pass  # the walk names the event that is not JSON
    return _parse(block.split(b"\n"))


def _parse(lines: list[bytearray]) -> tuple[list[dict[str, Any]], bool]:
    """The `data:` payloads of some SSE lines, parsed; True once `[DONE]` is among them. One JSON
    array for all of them: a parse per batch, not per chunk."""
    payloads = []
    done = False
    for line in lines:
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            payloads.append(payload)
    if not payloads:
        return [], done
    try:
        chunks = orjson.loads(b"[" + b",".join(payloads) + b"]")
        if len(chunks) == len(payloads):  # else a payload held a comma-separated list: not one chunk
            return chunks, done
    except orjson.JSONDecodeError:
        pass
    for payload in payloads:  # name the chunk that is not JSON
        try:
            orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise InvalidUpstream(f"upstream sent an invalid stream chunk: {bytes(payload[:200])!r}") from None
    raise AssertionError("unreachable: a batch that is not JSON has a payload that is not")
