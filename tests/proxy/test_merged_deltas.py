"""The pieces one read of the upstream brought reach the harness as one event of each kind
(`chat.merged`): nothing lost, nothing reordered, and the record keeps every token."""

from __future__ import annotations

import copy
import itertools
import random

import httpx
import orjson
import pytest

from nemo_polar.bench.fake_upstream import FakeUpstreamThread
from nemo_polar.chat import Delta, ToolCallDelta, merged
from tests.conftest import make_proxy, records

from .dialect_cases import CASES, IDS

TOKENS = 8  # every dialect's case asks for 8


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
@pytest.fixture(scope="module")
def one_write_proxy(tmp_path_factory):
    with FakeUpstreamThread() as up, make_proxy(up.url, tmp_path_factory.mktemp("one-write")) as p:
        yield p


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_reads_tokens_reach_the_harness_as_one_event(case, one_write_proxy):
    session = one_write_proxy.proxy.sessions.open()
    r = httpx.post(
        one_write_proxy.url + case.path(True),
        json=case.body("[fault:one_write] hi", True),
        headers=case.headers(session.api_key),
        timeout=10,
    )
    assert r.status_code == 200
    (rec,) = records(one_write_proxy, session.id)
    assert rec.status == "ok" and rec.message["content"] == " ".join(f"w{i}" for i in range(TOKENS))
    assert rec.completion_token_ids == [1000 + i for i in range(TOKENS)]
    assert rec.completion_logprobs == [-0.25 - i / 100 for i in range(TOKENS)]
    events = [e for e in r.content.split(b"\n\n") if e.strip()]
    # one token alone would be an event holding w3 without w4: every event holds both or neither
    assert all((b"w3" in e) == (b"w4" in e) for e in events), events
    assert orjson.dumps(rec.message["content"])[1:-1] in r.content  # the whole text in one piece
