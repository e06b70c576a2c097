"""Traces built from sessions real harnesses recorded through the proxy, checked in torch: on every
mask-1 position the model, teacher-forced on the trace's own preceding tokens, gives the token the
logprob the server reported. That holds exactly where the trace's context is what the model saw;
a repaired boundary (raw sampled tokens where the next prompt had re-rendered them) is off-policy
by design, so the strict check runs with repair off and the repaired figure is reported."""

from __future__ import annotations

import pytest

from nemo_polar.env.gym import primary_chain
from nemo_polar.harnesses import HARNESSES
from nemo_polar.traces import build

from .conftest import run_harness
from .torch_check import logprobs_of

pytestmark = [pytest.mark.vllm, pytest.mark.harness]

BOUND = 1e-4  # as in test_logprob_parity: measured max |Δ| is about 1e-6


def deltas(trace) -> list[float]:
    full = trace.prompt_ids + trace.response_ids
    out = []
    for s in trace.segments:
        if not s.trained:
            continue
        start = len(trace.prompt_ids) + s.start
        again = logprobs_of(full[:start], full[start : len(trace.prompt_ids) + s.end])
        out += [abs(a - b) for a, b in zip(again, trace.response_logprobs[s.start : s.end], strict=True)]
    return out


@pytest.mark.parametrize("name", ["mini_swe_agent", "qwen_code"])
def test_merged_traces_carry_on_policy_logprobs(name, real_proxy, tokenizer, tmp_path):
    run = run_harness(real_proxy, HARNESSES[name](), tmp_path, task="List the files here.", max_steps=4)
    assert run.returncode == 0 and len(run.records) >= 2, (run.returncode, len(run.records), run.stderr[-2000:])
    strict = build(run.records, tokenizer=tokenizer, repair=False)
    merged = build(run.records, tokenizer=tokenizer)
    per_request = build(run.records, "per_request")
    assert strict.stats.trained_tokens == merged.stats.trained_tokens == per_request.stats.trained_tokens
    assert merged.stats.trace_tokens <= per_request.stats.trace_tokens
    strict_deltas = [d for t in strict.traces for d in deltas(t)]
    assert len(strict_deltas) == strict.stats.trained_tokens and max(strict_deltas) < BOUND
    repaired = [d for t in merged.traces for d in deltas(t)]
    # qwen_code asks, beside the agent, what to remember of the session: a side call, never the chain trained
    HARNESSES[name].name_side_calls(merged.traces, {r.id: r.native_request for r in run.records})
    sides = [t.metadata.get("side_call") for t in merged.traces if t.metadata.get("side_call")]
    assert sides == (["memory"] if name == "qwen_code" else []), sides
    assert "side_call" not in merged.traces[primary_chain(merged.traces)].metadata
    print(
        f"\n{name}: {len(run.records)} calls -> {len(merged.traces)} trace(s), drift {merged.stats.drift}; "
        f"trace tokens {merged.stats.trace_tokens} vs per_request {per_request.stats.trace_tokens}; "
        f"strict max |Δ| {max(strict_deltas):.1e}; with repairs max |Δ| {max(repaired):.2e}"
    )


def test_a_multi_turn_conversation_merges_into_one_on_policy_chain(real_proxy, tokenizer):
    """A client that keeps every turn (as agent harnesses do on success): one chain, on-policy."""
    import openai

    session = real_proxy.proxy.sessions.open()
    client = openai.OpenAI(base_url=real_proxy.url + "/v1", api_key=session.api_key, max_retries=0)
    messages = [{"role": "system", "content": "You are terse."}]
    for turn in range(4):
        messages.append({"role": "user", "content": f"Step {turn}: go on."})
        out = client.chat.completions.create(model="tiny", messages=messages, max_tokens=24, seed=turn)
        messages.append({"role": "assistant", "content": out.choices[0].message.content or ""})
    real_proxy.proxy.store.flush()
    records = real_proxy.proxy.store.records(session.id)
    strict = build(records, tokenizer=tokenizer, repair=False)
    merged = build(records, tokenizer=tokenizer)
    assert len(merged.traces) == 1 and merged.stats.merged == 3
    assert set(merged.stats.drift) <= {"retokenization"}  # only ever the same text re-tokenised
    strict_deltas = [d for t in strict.traces for d in deltas(t)]
    assert max(strict_deltas) < BOUND
    if not merged.stats.repaired:  # no boundary re-tokenised: the merged chain is on-policy too
        assert max(deltas(merged.traces[0])) < BOUND
    print(
        f"\nconversation: 4 calls -> {len(merged.traces)} trace; drift {merged.stats.drift}; trace tokens "
        f"{merged.stats.trace_tokens} vs {build(records, 'per_request').stats.trace_tokens} per request"
    )


def test_opencode_continuing_its_session_extends_one_on_policy_chain(real_proxy, tokenizer, tmp_path):
    """opencode re-sends its history itself (from its session database): a second `run --continue` in the
    same HOME sends the first call's messages, its answer word for word (an empty answer left out), and
    the new instruction; the builder puts both calls in one chain (the random model's text may come back
    tokenised differently: a repaired `retokenization`), whose trained logprobs are the model's."""
    import asyncio

    from nemo_polar.harnesses import Endpoint
    from nemo_polar.runtimes.local import LocalRuntime

    harness, session = HARNESSES["opencode"](), real_proxy.proxy.sessions.open()

    async def run() -> list[int]:
        runtime = LocalRuntime(tmp_path, sandbox=True, session_id="oc", proxy_url=real_proxy.url)
        await runtime.start()
        try:
            codes = []
            for task in ("Say hello in one word.", "Now say goodbye."):
                launch = harness.launch(task, Endpoint(runtime.proxy_url, session.api_key), runtime.inside(), 2)
                if codes:
                    launch.argv.insert(launch.argv.index("run") + 1, "--continue")
                launch.write_files(runtime.home)
                codes.append((await runtime.exec(launch.argv, launch.env, timeout=300))[0])
            return codes
        finally:
            await runtime.stop()

    assert asyncio.run(run()) == [0, 0]
    real_proxy.proxy.store.flush()
    first, second = records = real_proxy.proxy.store.records(session.id)
    sent, answer = second.native_request["messages"], first.message["content"]
    assert sent[:2] == first.native_request["messages"] and sent[-1] == {"role": "user", "content": "Now say goodbye."}
    if not answer:  # an empty answer is not re-sent: the second call starts a chain of its own
        assert len(sent) == 3 and len(build(records, tokenizer=tokenizer).traces) == 2
        return
    assert sent[2] == {"role": "assistant", "content": answer}
    merged = build(records, tokenizer=tokenizer)
    assert len(merged.traces) == 1 and merged.stats.merged == 1 and set(merged.stats.drift) <= {"retokenization"}
    strict = build(records, tokenizer=tokenizer, repair=False)
    assert max(d for t in strict.traces for d in deltas(t)) < BOUND


def test_opencode_with_its_title_call_on_trains_the_agents_chain(real_proxy, tmp_path):
    """opencode with its session title on (its own default) asks for the title beside the agent's first call:
    that call is named a side call in the traces, and the chain picked for NeMo-RL's row is the agent's."""
    harness = HARNESSES["opencode"](title=True)
    run = run_harness(real_proxy, harness, tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    built = build(run.records, "prefix_tree")
    harness.name_side_calls(built.traces, {r.id: r.native_request for r in run.records})
    sides = [t for t in built.traces if t.metadata.get("side_call")]
    assert [t.metadata["side_call"] for t in sides] == ["title"], [t.metadata.get("seq") for t in built.traces]
    primary = built.traces[primary_chain(built.traces)]
    assert "side_call" not in primary.metadata
    first = next(r for r in run.records if r.id == primary.record_ids[0])
    assert "title generator" not in str(first.native_request)
