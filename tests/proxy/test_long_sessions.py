"""Long sessions through the proxy: what a history's unchanged part costs is taken from the last call,
and nothing a harness or the upstream sent is changed by it."""

from __future__ import annotations

import json
import random

import httpx
import orjson
import pytest

from nemo_polar.bench.fake_upstream import FakeUpstreamThread, HistoryIds, history_turn
from nemo_polar.chat import JoinedIds, as_list, same_prefix
from nemo_polar.proxy.backends import BACKENDS
from nemo_polar.proxy.backends.base import body_json
from nemo_polar.proxy.dialects import DIALECTS
from nemo_polar.proxy.history import Histories
from nemo_polar.proxy.prompt_ids import PromptIds
from tests.conftest import make_proxy

CHAT = DIALECTS["openai_chat"]
TOOL = {"type": "function", "function": {"name": "sh", "parameters": {"type": "object", "properties": {}}}}


def history(rng: random.Random, turns: int) -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": "agent ✓"}, {"role": "user", "content": "go"}]
    for t in range(turns):
        messages.append(history_turn(messages, "sh"))
        text = "".join(rng.choice('abc é\n{}[],"\\') for _ in range(rng.randint(0, 60)))
        messages.append({"role": "tool", "tool_call_id": f"call_{t}", "content": text})
    return messages


def encodings(body: dict, rng: random.Random) -> bytes:
    """The body as different harnesses serialise it: compact, spaced, pretty, non-ASCII escaped or not."""
    how = rng.randrange(4)
    if how == 0:
        return orjson.dumps(body)
    if how == 1:
        return json.dumps(body).encode()  # ", " and ": "
    if how == 2:
        return json.dumps(body, indent=2, ensure_ascii=False).encode()
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def parsed_fresh(raw: bytes):
    h = Histories()
    p = h.parse("s", CHAT, raw)
    h.validate(CHAT, p)
    return p, CHAT.parse_request(p.body, {}, {})


def test_a_history_parses_as_a_whole_parse_would_whatever_changed(seed=0):
    """Grown, edited in the middle, re-serialised differently, cut short, a key named twice: what the
    dialect reads and what the record keeps are what parsing the whole body gives."""
    rng = random.Random(seed)
    h = Histories(small=0)
    messages = history(rng, 3)
    for step in range(120):
        edit = rng.randrange(6)
        if edit <= 2:  # grows, as most calls do
            messages = messages + history(rng, 1)[2:]
        elif edit == 3 and len(messages) > 3:  # an earlier item changes (a cache marker moved)
            i = rng.randrange(len(messages))
            messages = messages[:i] + [dict(messages[i], cache=step)] + messages[i + 1 :]
        elif edit == 4:  # compaction
            messages = messages[:1] + [{"role": "user", "content": f"summary {step}"}]
        body = {"model": "m", "messages": messages, "tools": [TOOL], "max_tokens": 9}
        raw = encodings(body, rng)
        if edit == 5:  # the key named twice: the last one wins, as in a whole parse
            raw = raw[:-1] + b', "messages": [{"role": "user", "content": "twice"}]}'
        p = h.parse("s", CHAT, raw)
        assert orjson.dumps(p.native) == orjson.dumps(orjson.loads(raw)), step
        h.validate(CHAT, p)
        chat = CHAT.parse_request(p.body, {}, {})
        assert chat == parsed_fresh(raw)[1], step
        if p.seen is not None:
            h.keep("s", p.seen)


def test_unchanged_items_are_the_same_objects_and_only_new_bytes_are_parsed():
    h = Histories(small=0)
    messages = history(random.Random(1), 30)
    first = h.parse("s", CHAT, orjson.dumps({"model": "m", "messages": messages}))
    h.validate(CHAT, first)
    h.keep("s", first.seen)
    grown = messages + [{"role": "user", "content": "more"}]
    second = h.parse("s", CHAT, orjson.dumps({"model": "m", "messages": grown}))
    assert second.kept == len(messages)
    assert all(a is b for a, b in zip(second.native["messages"], first.native["messages"], strict=False))
    assert second.fresh["messages"] == [{"role": "user", "content": "more"}]  # all that was parsed, and walked
    assert second.body["messages"][0] is first.body["messages"][0]  # validated once
    with pytest.raises(Exception, match="not valid JSON"):
        h.parse("s", CHAT, orjson.dumps({"model": "m", "messages": grown})[:-3])


def test_a_deep_new_item_is_refused_after_a_reused_history(tmp_path):
    with FakeUpstreamThread(history=True) as up, make_proxy(up.url, tmp_path) as proxy:
        key = proxy.proxy.sessions.open().api_key
        messages = history(random.Random(2), 5)
        with httpx.Client(base_url=proxy.url, headers={"Authorization": f"Bearer {key}"}) as http:
            assert http.post("/v1/chat/completions", json={"model": "m", "messages": messages}).status_code == 200
            deep: object = "x"
            for _ in range(150):
                deep = [deep]
            body = {"model": "m", "messages": messages + [{"role": "user", "content": deep}]}
            out = http.post("/v1/chat/completions", json=body)
            assert out.status_code == 400 and "deeper" in out.json()["error"]["message"]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "nemo_rl"])
def test_prompt_ids_read_from_the_last_answer_are_what_a_whole_parse_gives(engine):
    backend = BACKENDS[engine]({})
    ids = HistoryIds()
    reader = PromptIds(small=0)
    messages = history(random.Random(3), 2)
    previous = None
    for t in range(12):
        prompt = ids.prompt(messages)
        choice = {"index": 0, "message": {"role": "assistant", "content": "ok"}, "token_ids": [7, 8]}
        answer: dict = {"choices": [choice], "usage": {}}
        if engine == "vllm":
            answer["prompt_token_ids"] = prompt
        elif engine == "sglang":
            choice["prompt_token_ids"] = prompt
        else:
            choice["message"]["prompt_token_ids"] = prompt
        raw = orjson.dumps(answer)
        body = reader.parse("s", backend, raw)
        assert body == orjson.loads(raw)
        got = backend.prompt_ids(body, body["choices"][0])
        if previous is not None:
            assert got[len(previous) - 1] is previous[-1]  # the same ints, not parsed again
            # and what the store is told they begin with, uncompared, is what they do begin with
            assert reader.extends("s", got) is previous and got[: len(previous)] == previous
        else:
            assert reader.extends("s", got) is None
        assert reader.extends("s", list(got)) is None  # only the ids as read
        previous = got
        messages = messages + history(random.Random(t), 1)[2:]
    with pytest.raises(orjson.JSONDecodeError):
        reader.parse("s", backend, raw[:-2])


def chat_turn(answer: dict, t: int, text: str) -> list[dict]:
    reply = answer["choices"][0]["message"]
    return [reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": text}]


def anthropic_turn(answer: dict, t: int, text: str, messages: list[dict]) -> list[dict]:
    """Claude Code's habit: the cache marker moves to the newest tool result, off the one before."""
    for m in messages:
        for block in m["content"] if isinstance(m["content"], list) else []:
            block.pop("cache_control", None)
    use = next(b for b in answer["content"] if b["type"] == "tool_use")
    result = {"type": "tool_result", "tool_use_id": use["id"], "content": text, "cache_control": {"type": "ephemeral"}}
    return [{"role": "assistant", "content": answer["content"]}, {"role": "user", "content": [result]}]


@pytest.mark.parametrize("dialect", ["openai_chat", "anthropic"])
def test_every_record_of_a_long_session_keeps_what_was_sent_and_what_went_upstream(dialect, tmp_path):
    rng = random.Random(4)
    with FakeUpstreamThread(history=True) as up, make_proxy(up.url, tmp_path) as proxy:
        session = proxy.proxy.sessions.open()
        messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": "fix the bug ✓"}]}]
        sent = []
        with httpx.Client(base_url=proxy.url, timeout=30) as http:
            for t in range(40):
                text = "".join(rng.choice('ab é\n{}"') for _ in range(rng.randint(1, 300)))
                if dialect == "openai_chat":
                    body = {"model": "m", "messages": messages, "tools": [TOOL]}
                    headers = {"Authorization": f"Bearer {session.api_key}"}
                    path = "/v1/chat/completions"
                else:
                    tool = {"name": "sh", "input_schema": {"type": "object"}}
                    body = {
                        "model": "m",
                        "max_tokens": 64,
                        "system": "be brief",
                        "messages": messages,
                        "tools": [tool],
                    }
                    headers = {"x-api-key": session.api_key, "anthropic-version": "2023-06-01"}
                    path = "/v1/messages"
                raw = encodings(body, rng)
                answer = http.post(path, content=raw, headers=headers | {"content-type": "application/json"})
                assert answer.status_code == 200, answer.text
                sent.append(raw)
                if dialect == "openai_chat":
                    messages = messages + chat_turn(answer.json(), t, text)
                else:
                    messages = messages + anthropic_turn(answer.json(), t, text, messages)
                messages = json.loads(json.dumps(messages))  # the harness's own objects, call after call
        upstream = list(up.fake.requests)
        recorded = proxy.proxy.records(session.id)
    assert len(recorded) == len(sent) == len(upstream) == 40
    for rec, raw, went in zip(recorded, sent, upstream, strict=True):
        assert orjson.dumps(rec.native_request) == orjson.dumps(orjson.loads(raw))
        assert orjson.dumps(rec.upstream_request) == orjson.dumps(went)
        assert rec.prompt_token_ids == HistoryIds().prompt(went["messages"]) and rec.status == "ok"


def test_prompt_ids_that_only_look_like_a_continuation_are_parsed_whole():
    reader, backend = PromptIds(small=0), BACKENDS["vllm"]({})
    for prompt in ([1, 2, 3], [1, 2, 345, 6], [1, 2, 345, 6], [1, 2], [1, 2, 345, 6, 7]):
        raw = orjson.dumps({"choices": [{"message": {}}], "prompt_token_ids": prompt})
        assert reader.parse("s", backend, raw)["prompt_token_ids"] == prompt


def test_the_upstream_body_is_what_serialising_it_whole_gives_and_its_kept_history_is_serialised_once():
    rng, histories, vllm = random.Random(7), Histories(small=0), BACKENDS["vllm"]()
    messages, kept = history(rng, 6), []
    for turn in range(4):
        raw = orjson.dumps({"model": "m", "messages": messages, "tools": [TOOL]})
        parsed = histories.parse("s", CHAT, raw)
        histories.validate(CHAT, parsed)
        request = CHAT.parse_request(parsed.body, {}, {})
        histories.keep("s", parsed.seen)
        body = vllm.build_body(request, None, "served")
        assert body_json(body, request.messages) == orjson.dumps(body)
        # the messages kept from the last call keep the JSON they were serialised to then
        assert all(m.chat_json is j for m, j in zip(request.messages, kept, strict=False))
        kept = [m.chat_json for m in request.messages]
        assert None not in kept
        # an engine's own dict where a message was (a splice) is serialised as it is
        spliced = body | {"messages": [*body["messages"][:-1], {"role": "tool", "content": f"turn {turn} ✓"}]}
        assert body_json(spliced, request.messages) == orjson.dumps(spliced)
        assert body_json(body | {"messages": []}, request.messages) == orjson.dumps(body | {"messages": []})
        messages = messages + [history_turn(messages, "sh"), {"role": "tool", "tool_call_id": "c", "content": "ok"}]


def test_joined_ids_read_as_the_list_they_stand_for():
    rng = random.Random(8)
    whole = [rng.randrange(50_000) for _ in range(40)]
    ids: list[int] | JoinedIds = whole[:5]
    for cut in range(10, 41, 5):
        ids = JoinedIds(ids, whole[len(ids) : cut])
    assert isinstance(ids, JoinedIds) and len(ids) == 40 and ids.tail == whole[35:]
    for i in (slice(None), slice(3, 17), slice(35, None), slice(36, 39), slice(38, 2), slice(None, None, -3), -1, 7):
        assert ids[i] == whole[i]
    assert ids == whole and whole == ids and ids == JoinedIds(whole[:20], whole[20:])
    assert ids != whole[:-1] and ids != [*whole[:-1], -1] and ids != tuple(whole)
    assert list(ids) == whole and as_list(ids) is ids.to_list() and as_list(whole) is whole
    deep: list[int] | JoinedIds = [0]
    for i in range(1, 20_000):  # a session of 20,000 calls reads without recursing
        deep = JoinedIds(deep, [i])
    assert as_list(deep) == list(range(20_000))


@pytest.mark.parametrize("engine", ["vllm", "sglang", "nemo_rl"])
def test_a_long_session_whose_prompts_are_joined_is_recorded_and_spliced_as_whole_lists(engine, tmp_path):
    """Every prompt read as the last answer's ids and the rest is stored as the list a whole parse gives;
    the turns NeMo-RL's server takes back carry their prompt as a JSON list."""
    with (
        FakeUpstreamThread(history=True, engine=engine) as up,
        make_proxy(up.url, tmp_path, upstream={"engine": engine, "model": up.fake.served_model}) as proxy,
    ):
        sessions = proxy.proxy.sessions
        sessions.prompt_ids = PromptIds(sessions.cache, small=0)
        session = sessions.open()
        messages = history(random.Random(9), 2)
        joined = 0
        auth = {"Authorization": f"Bearer {session.api_key}"}
        with httpx.Client(base_url=proxy.url, timeout=30, headers=auth) as http:
            for t in range(12):
                answer = http.post("/v1/chat/completions", json={"model": "m", "messages": messages, "tools": [TOOL]})
                assert answer.status_code == 200, answer.text
                joined += isinstance(sessions.cache.get("prompt_ids", session.id)[1], JoinedIds)
                messages = messages + chat_turn(answer.json(), t, f"output {t} ✓" * t)
        upstream = list(up.fake.requests)
        recorded = proxy.proxy.records(session.id)
    assert joined == 11  # every prompt after the first
    for rec, went in zip(recorded, upstream, strict=True):
        assert type(rec.prompt_token_ids) is list and rec.status == "ok"
        assert rec.prompt_token_ids == HistoryIds().prompt(went["messages"])
    if engine == "nemo_rl":  # each earlier turn goes back with the prompt it was sampled from
        spliced = [m for m in upstream[-1]["messages"] if "prompt_token_ids" in m]
        assert [m["prompt_token_ids"] for m in spliced] == [r.prompt_token_ids for r in recorded[:-1]]


def test_a_history_grown_edited_and_cut_converts_and_goes_upstream_as_a_whole_parse_would():
    """The last call's messages and upstream JSON are reused up to the first item that is not the same
    object; whatever changed, what the dialect reads and what goes upstream are a whole parse's."""
    rng, histories, vllm = random.Random(11), Histories(small=0), BACKENDS["vllm"]()
    messages = history(rng, 6)
    for step in range(40):
        edit = rng.randrange(4)
        if edit <= 1:
            messages = messages + history(rng, 1)[2:]
        elif edit == 2:
            i = rng.randrange(len(messages))
            messages = [*messages[:i], {**messages[i], "content": f"edited {step} ✓"}, *messages[i + 1 :]]
        else:
            messages = messages[: max(1, len(messages) - rng.randint(1, 3))]
        raw = orjson.dumps({"model": "m", "messages": messages, "tools": [TOOL]})
        parsed = histories.parse("s", CHAT, raw)
        histories.validate(CHAT, parsed)
        request = CHAT.parse_request(parsed.body, {}, {})
        histories.keep("s", parsed.seen)
        assert request.messages == parsed_fresh(raw)[1].messages
        body = vllm.build_body(request, None, "served")
        assert body_json(body, request.messages) == orjson.dumps(body)


def test_same_prefix_counts_the_leading_items_that_are_the_same_objects():
    a, b, c = {"x": 1}, {"x": 1}, {"x": 2}
    assert same_prefix([a, b, c], [a, b]) == 2 and same_prefix([a, b], [a, b, c]) == 2
    assert same_prefix([a, b, c], [a, {"x": 1}, {"x": 2}]) == 1  # equal is not the same: compared one by one
    assert same_prefix([a, {"x": 1}], [a, b]) == 1 and same_prefix([b], [a]) == 0 and same_prefix([], [a]) == 0
