"""OpenHands (SDK, local workspace) -> the proxy -> real vLLM on the tiny model: it ends normally and
every call it made is in the store with prompt ids, completion ids and one logprob per completion
token. Needs .deps/openhands (scripts/setup.sh openhands)."""

from __future__ import annotations

import pytest

from nemo_polar.harnesses import HARNESSES
from nemo_polar.harnesses.install import check_install
from nemo_polar.runtimes.toolchain import TOOLS
from tests.harness_calls import capture_requested, save_calls

from .conftest import run_harness

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.harness,
    pytest.mark.skipif(
        not (TOOLS / "openhands" / "bin" / "python").exists(),
        reason=f"OpenHands is not installed at {TOOLS / 'openhands'}: run scripts/setup.sh openhands",
    ),
]


def test_openhands_runs_through_the_proxy_token_faithfully(real_proxy, tokenizer, tmp_path):
    harness = HARNESSES["openhands"]()
    check_install(harness)
    run = run_harness(real_proxy, harness, tmp_path, task="Say hello in one word.", max_steps=2)
    # 0: the agent finished; 2: it used up its steps (a random model rarely calls `finish`)
    assert run.returncode in (0, 2), f"openhands exited {run.returncode}:\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    assert run.records, "openhands made no model call through the proxy"
    if capture_requested("openhands"):  # kept as replay cases (tests/proxy)
        save_calls("openhands", harness.pin.version, run.records)
    for rec in run.records:
        assert rec.status == "ok", (rec.status, rec.error)
        assert rec.dialect == "openai_chat" and rec.stream is False
        assert rec.prompt_token_ids and rec.completion_token_ids
        assert len(rec.completion_logprobs) == len(rec.completion_token_ids)
        assert all(lp <= 0.0 for lp in rec.completion_logprobs)
        assert rec.upstream_request["return_token_ids"] is True
        assert {t["function"]["name"] for t in rec.native_request["tools"]} >= {"terminal", "finish"}
        if not rec.message["tool_calls"]:
            assert tokenizer.decode(rec.completion_token_ids, skip_special_tokens=True) == rec.message["content"]
    key = run.api_key
    assert all(key not in rec.model_dump_json() for rec in run.records)
