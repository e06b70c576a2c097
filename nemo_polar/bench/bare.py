"""The floor any Python hop has: an aiohttp pass-through that parses, translates and records nothing.

`polar bench proxy` runs it beside the proxy, on the same event loop (uvloop) and the same HTTP
client (aiohttp), so that what the proxy adds can be read as a ratio to what any relay must spend.
It belongs to the benchmark, never to the product: no keys, no dialects, no records.
"""

from __future__ import annotations

import aiohttp
import uvloop
from aiohttp import web


class BareRelay:
    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.http: aiohttp.ClientSession | None = None
        self.app = web.Application(client_max_size=256 * 2**20)
        self.app.router.add_get("/health", self.health)
        self.app.router.add_post("/{path:.*}", self.forward)
        self.app.on_startup.append(self._open)
        self.app.on_cleanup.append(self._close)

    async def _open(self, app: web.Application) -> None:
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def _close(self, app: web.Application) -> None:
        assert self.http is not None
        await self.http.close()

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def forward(self, request: web.Request) -> web.StreamResponse:
        assert self.http is not None
        body = await request.read()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        async with self.http.post(self.upstream + request.path_qs, data=body, headers=headers) as up:
            content_type = up.headers.get("Content-Type", "application/json")
            if not content_type.startswith("text/event-stream"):
                return web.Response(body=await up.read(), status=up.status, headers={"Content-Type": content_type})
            resp = web.StreamResponse(status=up.status, headers={"Content-Type": content_type})
            await resp.prepare(request)
            async for chunk in up.content.iter_any():  # relayed as it arrives, like a real stream
                await resp.write(chunk)
            await resp.write_eof()
            return resp


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description="bare aiohttp pass-through (the proxy benchmark's floor)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True)
    a = p.parse_args()
    relay = BareRelay(a.upstream)
    web.run_app(
        relay.app,
        host="127.0.0.1",
        port=a.port,
        access_log=None,
        print=None,
        backlog=4096,
        loop=uvloop.new_event_loop(),
    )


if __name__ == "__main__":
    main()
