"""Real harness CLIs -> the proxy -> real vLLM on the tiny model. Every call each harness made must
be in the store, token-faithful: prompt ids, completion ids, one logprob per completion token, and
completion ids that decode to exactly the text the harness was sent."""

from __future__ import annotations

import pytest

from nemo_polar.harnesses import HARNESSES
from nemo_polar.harnesses.pi import Pi
from tests.harness_calls import capture_requested, save_calls

from .conftest import run_harness

pytestmark = [pytest.mark.vllm, pytest.mark.harness]

# (harness, the dialect its calls must arrive in, whether it streams)
CASES = {
    "codex": (HARNESSES["codex"](), "openai_responses", True),
    "claude_code": (HARNESSES["claude_code"](), "anthropic", True),
    "qwen_code": (HARNESSES["qwen_code"](), "openai_chat", True),
    "gemini_cli": (HARNESSES["gemini_cli"](), "gemini", True),
    "opencode": (HARNESSES["opencode"](), "openai_chat", True),
    "cline": (HARNESSES["cline"](), "openai_chat", True),
    "kilocode": (HARNESSES["kilocode"](), "openai_chat", True),
    "openclaw": (HARNESSES["openclaw"](), "openai_chat", True),
    "mini_swe_agent": (HARNESSES["mini_swe_agent"](), "openai_chat", False),
    "aider": (HARNESSES["aider"](), "openai_chat", True),
    **{f"pi-{d}": (Pi(dialect=d), d, True) for d in ("openai_chat", "openai_responses", "anthropic", "gemini")},
}


@pytest.mark.parametrize("name", list(CASES))
def test_harness_calls_are_recorded_token_faithfully(name, real_proxy, tokenizer, tmp_path):
    harness, dialect, streams = CASES[name]
    run = run_harness(real_proxy, harness, tmp_path, task="Say hello in one word.")
    assert run.returncode == 0, f"{name} exited {run.returncode}:\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    assert run.records, f"{name} made no model call through the proxy"
    if capture_requested(name) and harness.pin is not None:  # kept as replay cases (tests/proxy)
        save_calls(name, harness.pin.version, run.records)
    for rec in run.records:
        assert rec.status == "ok", (rec.status, rec.error)
        assert rec.dialect == dialect and rec.stream is streams
        assert rec.prompt_token_ids and rec.completion_token_ids
        assert len(rec.completion_logprobs) == len(rec.completion_token_ids)
        assert all(lp <= 0.0 for lp in rec.completion_logprobs)
        assert rec.upstream_request["return_token_ids"] is True
        if not rec.message["tool_calls"]:
            assert tokenizer.decode(rec.completion_token_ids, skip_special_tokens=True) == rec.message["content"]
    # the session key never reaches a record
    key = run.api_key
    assert all(key not in rec.model_dump_json() for rec in run.records)
    assert [r.seq for r in run.records] == list(range(len(run.records)))
