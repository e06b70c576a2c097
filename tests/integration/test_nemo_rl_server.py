"""The `nemo_rl` engine against NeMo-RL's own vLLM HTTP server: its `_setup_vllm_openai_api_server`, run from the
checkout over the vLLM it pins (`scripts/setup.sh nemo_rl_vllm`), on the tiny model. Every dialect, streamed and
not, through the proxy; tool calls; the multi-turn splice ending in one trace; a sampling pair the server
refuses, a context it cannot hold and a missing model name, each a clear error; `polar up` through it. (Every
harness configuration through it, `polar runtime check`: tests/integration/test_runtime_image.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from nemo_polar.cli.up import UpConfig, up
from nemo_polar.config import load
from nemo_polar.learn import LearnConfig, learn
from nemo_polar.local.vllm_server import VLLMServer
from nemo_polar.nemo_rl.server import NEMO_RL_VLLM_PYTHON, NemoRLServer, local_server
from nemo_polar.proxy.serve import ProxyThread
from nemo_polar.store import SqliteStore
from nemo_polar.traces import build

from ..conftest import NEMO_RL_PAIR, NEMO_RL_SERVED, make_proxy, records, requires_nemo_rl
from ..proxy.dialect_cases import CASES, IDS

pytestmark = [pytest.mark.vllm, requires_nemo_rl]
SERVED, PAIR = NEMO_RL_SERVED, NEMO_RL_PAIR


@pytest.fixture(scope="module")
def server(nemo_rl_server) -> NemoRLServer:
    return nemo_rl_server


@pytest.fixture
def proxy(server, tmp_path) -> Iterator[ProxyThread]:
    upstream = {"engine": "nemo_rl", "model": SERVED, "sampling": PAIR, "timeout_s": 120}
    with make_proxy(server.url, tmp_path, upstream=upstream, limits={"max_tokens": 16}) as p:
        yield p


def _call(proxy: ProxyThread, case, text: str, stream: bool, key: str | None = None) -> httpx.Response:
    key = key or proxy.proxy.sessions.open().api_key
    return httpx.post(
        proxy.url + case.path(stream), json=case.body(text, stream), headers=case.headers(key), timeout=120
    )


def test_it_is_nemo_rls_server(server):
    """Its routes, not vLLM's: no model list, and the answer's token fields on the message."""
    assert httpx.get(server.url + "/v1/models").status_code == 404
    body = {"model": SERVED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, **PAIR}
    body |= {"logprobs": True, "top_logprobs": 0}
    message = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120).json()["choices"][0]["message"]
    assert message["prompt_token_ids"] and len(message["generation_token_ids"]) == len(message["generation_log_probs"])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_dialect_is_answered_token_faithfully(proxy, case, stream):
    session = proxy.proxy.sessions.open()
    answer = _call(proxy, case, "Say hello.", stream, session.api_key)
    assert answer.status_code == 200, answer.text
    if stream:
        assert "text/event-stream" in answer.headers["content-type"] and answer.text.count("data:") >= 2
    (record,) = records(proxy, session.id)
    assert record.status == "ok" and record.stream == stream and record.upstream.engine == "nemo_rl"
    assert record.prompt_token_ids and record.completion_token_ids
    assert len(record.completion_logprobs) == len(record.completion_token_ids)
    sent = record.upstream_request
    assert (sent["model"], sent["temperature"], sent["top_p"], sent["stream"]) == (SERVED, 1.0, 1.0, False)


TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}]


def _chat(proxy: ProxyThread, key: str, messages: list[dict]) -> dict:
    body = {"model": "m", "tools": TOOLS, "max_tokens": 8, "messages": messages}
    answer = httpx.post(
        proxy.url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}, timeout=120
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["choices"][0]["message"]


def test_a_second_turn_splices_the_first_and_both_make_one_trace(proxy):
    """Turn 2 sends turn 1's answer back as a harness does (re-serialised, no token fields): the proxy re-attaches
    them, NeMo-RL's server puts those exact ids in place of the re-rendered turn, and the two calls merge into one
    trace with no drift."""
    session = proxy.proxy.sessions.open()
    first = [{"role": "user", "content": "List the files."}]
    said = _chat(proxy, session.api_key, first)["content"]
    _chat(
        proxy, session.api_key, first + [{"role": "assistant", "content": said}, {"role": "user", "content": "Go on."}]
    )
    first_rec, second_rec = records(proxy, session.id)
    spliced = second_rec.upstream_request["messages"][1]
    assert spliced["generation_token_ids"] == first_rec.completion_token_ids  # sent back to the server
    turn = list(first_rec.prompt_token_ids) + list(first_rec.completion_token_ids)
    assert list(second_rec.prompt_token_ids)[: len(turn)] == turn  # and used
    result = build([first_rec, second_rec])
    assert len(result.traces) == 1 and not result.drift_events


def test_tool_calls_and_their_results_go_through(proxy):
    """A history with the agent's tool call and its result, the tools declared: rendered by the server's template
    with its tool parser on, answered, recorded."""
    session = proxy.proxy.sessions.open()
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    history = [
        {"role": "user", "content": "List the files."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py\nb.py"},
    ]
    _chat(proxy, session.api_key, history)
    (record,) = records(proxy, session.id)
    sent = record.upstream_request
    assert record.status == "ok" and sent["tools"][0]["function"]["name"] == "bash"
    assert sent["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"command": "ls"}'
    assert record.completion_token_ids and record.prompt_token_ids


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_sampling_pair_it_refuses_is_a_clear_error(server, tmp_path, case):
    """A proxy pinned to a pair the server was not started with: NeMo-RL's assertion is a bare HTTP 500, which the
    harness gets in its own dialect with the pair sent and what to change, and the store keeps."""
    upstream = {"engine": "nemo_rl", "model": SERVED, "sampling": {"temperature": 0.7, "top_p": 1.0}}
    with make_proxy(server.url, tmp_path, upstream=upstream | {"timeout_s": 120}) as p:
        session = p.proxy.sessions.open()
        answer = _call(p, case, "hi", False, session.api_key)
        assert answer.status_code == 502
        message = case.error_message(answer.json())
        assert "HTTP 500" in message and "temperature=0.7, top_p=1.0" in message and "upstream.sampling" in message
        (record,) = records(p, session.id)
        assert record.status == "upstream_error" and "temperature=0.7" in record.error


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_context_it_cannot_hold_is_a_clear_error(proxy, server, case):
    long = "word " * (server.max_model_len + 100)
    answer = _call(proxy, case, long, False)
    assert answer.status_code == 400, answer.text
    message = case.error_message(answer.json()).lower()  # in the dialect's own words (Anthropic: "too long")
    assert "context" in message or "prompt is too long" in message, message


def test_a_proxy_without_a_model_name_refuses_to_start(server, tmp_path):
    """NeMo-RL's server lists no model: `polar proxy` for it without upstream.model stops at once, saying so;
    a session of a running proxy that has no name gets the same reason, recorded."""
    done = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "proxy", "upstream.engine=nemo_rl", f"upstream.url={server.url}",
         f"store.path={tmp_path / 'r.sqlite'}", "port=0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0 and "lists no models" in done.stderr and "upstream.model" in done.stderr
    with make_proxy(server.url, tmp_path, upstream={"engine": "nemo_rl"}) as p:
        session = p.proxy.sessions.open()
        answer = _call(p, CASES[0], "hi", False, session.api_key)
        assert answer.status_code == 502 and "lists no models" in answer.json()["error"]["message"]
        (record,) = records(p, session.id)
        assert record.status == "upstream_error" and "upstream.model" in record.error


@pytest.mark.harness
def test_polar_up_runs_a_harness_through_it(server, tmp_path):
    """`polar up backend=nemo_rl` on a running NeMo-RL server (`vllm.start=false`): Pi's sessions complete, every
    call answered by it with its token fields."""
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text(json.dumps({"instruction": "Say hi.", "fields": {"id": "hi"}}) + "\n")
    overrides = [f"dataset={dataset}", f"run_dir={tmp_path / 'runs'}", "harnesses=[{name: pi}]", "num_samples=2",
                 "evaluator=session_completed", "backend=nemo_rl", "vllm.start=false",
                 f"proxy.upstream.url={server.url}", f"proxy.upstream.model={SERVED}"]  # fmt: skip
    summary = up(load(UpConfig, "up", overrides))
    assert summary["sessions"] == 2 and summary["by_status"] == {"completed": 2}, summary
    (run,) = (tmp_path / "runs").iterdir()
    store = SqliteStore(run / "records.sqlite", read_only=True)
    calls = [r for s in store.sessions() for r in store.records(s.id)]
    assert calls and all(r.status == "ok" and r.upstream.engine == "nemo_rl" and r.completion_token_ids for r in calls)


def test_polar_up_and_the_check_start_nemo_rls_server_for_its_engine():
    """What `polar up backend=nemo_rl` and `polar runtime check --engine nemo_rl` start: NeMo-RL's server, asserting
    the pair the proxy pins."""
    started = local_server("nemo_rl", {"temperature": 0.7, "top_p": 0.9}, port=1234)
    assert isinstance(started, NemoRLServer) and started.python == NEMO_RL_VLLM_PYTHON
    command = started.command()
    assert json.loads(command[command.index("--sampling") + 1]) == {"temperature": 0.7, "top_p": 0.9}
    assert type(local_server("vllm", port=1234)) is VLLMServer
    with pytest.raises(ValueError, match="sglang"):
        local_server("sglang", port=1234)


def test_polar_learn_runs_on_nemo_rls_runtime_its_gym_actor_collecting(tmp_path):
    """`polar learn serving=nemo_rl rollouts=nemo_rl` for two small steps: NeMo-RL's server serves (a server of the
    run's own, on the policy's folder), NeMo-RL's Gym actor collects each step through our Gym servers, its
    post-processing makes the batch, its loss trains, the weights reload into its server in place (its logprobs
    match a torch recompute of the weights just trained), and the calls of step k carry version k. Whether the
    reward rises is left to the longer runs (docs/training.md)."""
    cfg = LearnConfig(
        run_dir=str(tmp_path), steps=2, prompts=2, samples=4, serving="nemo_rl", rollouts="nemo_rl", solved_after=None
    )
    run = learn(cfg)
    assert (run["rollouts"], run["serving"], run["post_processing"], run["loss"]) == ("nemo_rl",) * 4
    assert run["chains"] == "primary" and run["sessions_by_node"] == {"node-0": 16}
    assert run["steps"] == 2 and run["max_logprob_err"] <= 1e-4
    assert [h["policy_versions"] for h in run["history"]] == [["0"], ["1"]]
    assert all(h["samples"] == 8 and h["left_out"] == 0 for h in run["history"])
