"""A small seeded run of `polar bench fuzz`: mutated harness-shaped requests on every model route and
the rollout server's task route; nothing unhandled, every error in its dialect, no answer without its
record, no record in another session, the writer alive."""

from __future__ import annotations

import random

import orjson

from nemo_polar.bench.fuzz import ROUTES, dialect_shaped, mutate, run, seeds


def test_a_seeded_fuzz_run_finds_nothing():
    out = run(per_route=150, seed=7, concurrency=8)
    assert out["requests"] == 150 * (len(ROUTES) + 1) + 2  # and the two fixed rollout probes
    assert (out["unhandled_5xx"], out["not_dialect_shaped"], out["lost_records"], out["wrong_session"]) == (
        0,
        0,
        0,
        0,
    ), out["examples"]
    assert out["writer_alive"] and out["answered"] > 100  # enough accepted to judge the records
    assert out["sent_mb"] > 0 and 0 < out["proxy_rss_mb"]["end"] <= out["proxy_rss_mb"]["peak"]
    rejected = sum(n for k, n in out["statuses"].items() if k.endswith(":400"))
    assert rejected > 100  # and enough refused to judge the error shapes


def test_mutations_are_seeded_and_reach_every_kind():
    rng, again = random.Random(3), random.Random(3)
    body = seeds("openai_chat", "m")[1]
    first = [mutate(body, rng) for _ in range(300)]
    assert first == [mutate(body, again) for _ in range(300)]
    deep = [raw for raw in first if b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[" in raw]
    not_json = [raw for raw in first if not _parses(raw)]
    assert deep and not_json and len(set(first)) > 200


def test_the_dialect_shape_check_refuses_other_shapes():
    assert dialect_shaped("openai", {"error": {"message": "x", "type": "invalid_request_error"}})
    assert not dialect_shaped("anthropic", {"error": {"message": "x"}})  # OpenAI's shape is not Anthropic's
    assert not dialect_shaped("gemini", {"error": {"message": "x"}})
    assert not dialect_shaped("openai", "Internal Server Error")


def _parses(raw: bytes) -> bool:
    try:
        orjson.loads(raw)
        return True
    except orjson.JSONDecodeError:
        return False
