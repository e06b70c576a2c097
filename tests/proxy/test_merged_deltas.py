"""The pieces one read of the upstream brought reach the harness as one event of each kind
(`chat.merged`): nothing lost, nothing reordered, and the record keeps every token."""

from __future__ import annotations

import asyncio
import copy
import itertools
import random
import threading
from collections.abc import Iterator

import httpx
import orjson
import pytest
from aiohttp import web

from nemo_polar.chat import Delta, ToolCallDelta, merged
from tests.conftest import make_proxy, records

from .dialect_cases import CASES, IDS

TOKENS = 32


def _random_deltas(rng: random.Random) -> list[Delta]:
    out: list[Delta] = []
    started: set[int] = set()
    for _ in range(rng.randint(0, 30)):
        kind = rng.choice(["text", "reasoning", "call", "mixed"])
        piece = rng.choice(["a", "bc", " ", "{", "\n"])
        if kind == "text":
            out.append(Delta(text=piece))
        elif kind == "reasoning":
            out.append(Delta(reasoning=piece))
        elif kind == "mixed":
            out.append(Delta(text=piece, reasoning=piece))
        else:
            index = rng.randint(0, 2)
            first = index not in started
            started.add(index)
            out.append(
                Delta(tool_call=ToolCallDelta(index, f"id{index}" if first else None, "f" if first else None, piece))
            )
    return out


def _flat(deltas: list[Delta]) -> list[tuple]:
    """The deltas one character of a piece per entry, a call's start as an entry of its own: two runs of pieces
    are the same run of pieces however they are cut."""
    out: list[tuple] = []
    for d in deltas:
        t = d.tool_call
        if d.text and d.reasoning:
            out.append(("mixed", d.text, d.reasoning))
        elif t is not None:
            if t.id is not None or t.name is not None:  # a call's start
                out.append(("call", t.index, t.id, t.name, ""))
            out += [("call", t.index, None, None, ch) for ch in t.arguments]
        else:
            out += [("text", ch) for ch in d.text] + [("reasoning", ch) for ch in d.reasoning]
    return out


def test_merged_keeps_every_piece_in_order_and_leaves_no_run_apart():
    rng = random.Random(7)
    for _ in range(3000):
        deltas = _random_deltas(rng)
        before = _flat(copy.deepcopy(deltas))  # merged extends the first piece of each run in place
        out = merged(deltas)
        assert _flat(out) == before
        for a, b in itertools.pairwise(out):  # a piece that continues the one before it was joined to it
            if b.tool_call is not None:
                continues = (
                    a.tool_call is not None
                    and not (a.text or a.reasoning or b.text or b.reasoning)
                    and a.tool_call.index == b.tool_call.index
                    and b.tool_call.id is None
                )
            else:
                continues = a.tool_call is None and not (a.text and a.reasoning) and not (b.text and b.reasoning)
                continues = continues and bool(a.text) == bool(b.text)
            assert not continues, (a, b)


# --- through the proxy: an upstream whose whole answer comes in one write ------------------------
def _answer() -> bytes:
    base = {"id": "one-write", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks = [
        base
        | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}], "prompt_token_ids": [1, 2, 3]}
    ]
    for i in range(TOKENS):
        choice = {"index": 0, "delta": {"content": f"{' ' if i else ''}t{i}"}, "token_ids": [100 + i]}
        chunks.append(base | {"choices": [choice | {"logprobs": {"content": [{"logprob": -i / 100}]}}]})
    chunks.append(base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append(base | {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": TOKENS}})
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


@pytest.fixture(scope="module")
def one_write_upstream() -> Iterator[str]:
    body = _answer()

    async def chat(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(body)  # every event in one write: the proxy reads them together
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.run_until_complete(runner.cleanup())


@pytest.fixture(scope="module")
def one_write_proxy(one_write_upstream, tmp_path_factory):
    with make_proxy(one_write_upstream, tmp_path_factory.mktemp("one-write"), upstream={"model": "m"}) as p:
        yield p


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_reads_tokens_reach_the_harness_as_one_event(case, one_write_proxy):
    session = one_write_proxy.proxy.sessions.open()
    r = httpx.post(
        one_write_proxy.url + case.path(True),
        json=case.body("hi", True),
        headers=case.headers(session.api_key),
        timeout=10,
    )
    assert r.status_code == 200
    events = [e for e in r.content.split(b"\n\n") if e.strip()]
    text = " ".join(f"t{i}" for i in range(TOKENS))
    assert len(events) < TOKENS, f"{len(events)} events for {TOKENS} tokens read at once"
    assert orjson.dumps(text)[1:-1] in r.content  # the whole text in one piece
    (rec,) = records(one_write_proxy, session.id)
    assert rec.status == "ok" and rec.message["content"] == text
    assert rec.completion_token_ids == [100 + i for i in range(TOKENS)]
    assert rec.completion_logprobs == [-i / 100 for i in range(TOKENS)]
