"""The engines' token fields: SGLang's meta_info triples, NeMo-RL's message fields and its splice."""

from __future__ import annotations

import httpx
import openai
import pytest

from nemo_polar.bench.fake_upstream import SERVED_MODEL, FakeUpstreamThread
from tests.conftest import make_proxy, records


def _client(proxy):
    key = proxy.proxy.sessions.open().api_key
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0), key


@pytest.mark.parametrize("stream", [False, True])
def test_sglang_token_fields(tmp_path, stream):
    with FakeUpstreamThread(engine="sglang") as up, make_proxy(up.url, tmp_path, upstream={"engine": "sglang"}) as p:
        client, _ = _client(p)
        out = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=stream
        )
        if stream:
            list(out)
        (rec,) = records(p, p.proxy.store.sessions()[-1].id)
        assert rec.completion_token_ids == [1000, 1001, 1002] and len(rec.completion_logprobs) == 3
        sent = httpx.get(up.url + "/_requests").json()[-1]
        assert sent["return_prompt_token_ids"] is True and sent["return_meta_info"] is True


def test_nemo_rl_pins_sampling_and_splices_earlier_turns(tmp_path):
    # NeMo-RL's server lists no model: the name comes from configuration
    pinned = {"engine": "nemo_rl", "model": SERVED_MODEL, "sampling": {"temperature": 0.7, "top_p": 0.95}}
    with FakeUpstreamThread(engine="nemo_rl") as up, make_proxy(up.url, tmp_path, upstream=pinned) as p:
        client, _ = _client(p)
        tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
        first = [{"role": "user", "content": "[fault:tool_call] go"}]
        out = client.chat.completions.create(
            model="m", messages=first, tools=tools, temperature=0.1, extra_body={"top_k": 5}
        )
        call = out.choices[0].message.tool_calls[0]
        # the harness sends the turn back re-serialised, without any token field
        history = first + [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{ "command" : "ls" }'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.id, "content": "a.py"},
            {"role": "user", "content": "and now?"},
        ]
        list(client.chat.completions.create(model="m", messages=history, tools=tools, stream=True))
        sent = httpx.get(up.url + "/_requests").json()
        assert all(b["temperature"] == 0.7 and b["top_p"] == 0.95 and "top_k" not in b for b in sent)
        assert all(b["stream"] is False and b["n"] == 1 for b in sent)  # the engine answers whole turns
        first_rec, second_rec = records(p, p.proxy.store.sessions()[-1].id)
        spliced = sent[1]["messages"][1]
        assert spliced["prompt_token_ids"] == first_rec.prompt_token_ids
        assert spliced["generation_token_ids"] == first_rec.completion_token_ids
        assert spliced["generation_log_probs"] == first_rec.completion_logprobs
        assert second_rec.status == "ok" and second_rec.stream


def test_missing_token_fields_never_pass_silently(tmp_path):
    # a vLLM started without token-id support answers plain OpenAI: that is an operator-visible error
    with FakeUpstreamThread(engine="plain") as up, make_proxy(up.url, tmp_path) as p:
        client, _ = _client(p)
        with pytest.raises(openai.APIStatusError) as exc:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert exc.value.status_code == 502 and "token ids" in exc.value.message
