"""Logprob parity: the logprobs vLLM reported for sampled tokens, recomputed in torch on CPU by
teacher forcing prompt + completion through the same tiny-model weights.

Measured on this machine (vLLM float32 on CPU against torch float32): max |Δ| = 9.5e-7, mean
|Δ| = 1.5e-7 over 56 sampled tokens. The bound, 1e-4, leaves two orders of magnitude for kernel
differences (vLLM's CPU attention and GEMMs are not torch's) while a wrong token, a shifted
position or a logprob taken after temperature or top-k (0.1 to several nats) would all fail it.
"""

from __future__ import annotations

import anthropic
import openai
import pytest

from .torch_check import logprobs_of

pytestmark = pytest.mark.vllm

BOUND = 1e-4


def test_recorded_logprobs_match_a_torch_recompute(real_proxy):
    session = real_proxy.proxy.sessions.open()
    chat = openai.OpenAI(base_url=real_proxy.url + "/v1", api_key=session.api_key, max_retries=0)
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Count to three."}]
    for i in range(3):
        chat.chat.completions.create(model="tiny", messages=messages, max_tokens=40, temperature=1.0)
        list(chat.chat.completions.create(model="tiny", messages=messages, max_tokens=40, stream=True, seed=i))
    claude = anthropic.Anthropic(base_url=real_proxy.url, api_key=session.api_key, max_retries=0)
    claude.messages.create(model="tiny", max_tokens=40, messages=[{"role": "user", "content": "Hi"}])
    real_proxy.proxy.store.flush()
    records = real_proxy.proxy.store.records(session.id)
    assert len(records) == 7 and all(r.status == "ok" for r in records)
    deltas = []
    for r in records:
        again = logprobs_of(r.prompt_token_ids, r.completion_token_ids)
        deltas += [abs(a - b) for a, b in zip(again, r.completion_logprobs, strict=True)]
    worst, mean = max(deltas), sum(deltas) / len(deltas)
    print(f"\nlogprob parity over {len(deltas)} sampled tokens: max |Δ| = {worst:.2e}, mean |Δ| = {mean:.2e}")
    assert worst < BOUND, f"max |Δ| {worst:.2e} over the {BOUND:.0e} bound (mean {mean:.2e})"
