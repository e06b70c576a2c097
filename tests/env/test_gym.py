"""A session's verdict as the Gym agent returns it, judged by NeMo-RL's own post-processing."""

from __future__ import annotations

from nemo_polar.contracts import FailureKind
from nemo_polar.env.gym import (
    META_SESSION,
    META_TASK,
    Verdict,
    primary_chain,
    rollout_result,
    task_from_row,
    unavailable_result,
)
from nemo_polar.harnesses import HARNESSES
from nemo_polar.traces.export import write_jsonl
from nemo_polar.traces.models import Segment, Trace

from ..conftest import nemo_rl_judge, requires_nemo_rl


def _session(tmp_path, components: dict[str, float]) -> dict:
    """A completed session of one trained call whose answer has no text (the tokens decode to nothing)."""
    trace = Trace(
        prompt_ids=[1, 2, 3],
        response_ids=[10, 11],
        loss_mask=[1, 1],
        response_logprobs=[-0.1, -0.2],
        record_ids=["r1"],
        segments=[Segment(record_id="r1", start=0, end=2, trained=True)],
        metadata={"seq": [0]},
    )
    path = tmp_path / "s1.jsonl"
    write_jsonl([trace], path, session_id="s1")
    reward = sum(components.values())
    result = {"status": "completed", "reward": reward, "reward_components": components, "traces_path": str(path)}
    return {"session_id": "s1", "state": "completed", "result": result}


def test_a_reward_of_one_part_is_sent_as_the_reward_alone():
    assert "reward_components" not in Verdict(1.0, reward_components={"tests": 1.0}).fields()
    several = Verdict(1.0, reward_components={"tests": 0.75, "style": 0.25}).fields()
    assert several["reward_components"] == {"tests": 0.75, "style": 0.25}


@requires_nemo_rl
def test_nemo_rl_penalises_an_empty_answer_without_failing_the_batch(tmp_path):
    """NeMo-RL's empty-final-answer penalty zeroes `reward` but not its parts, then checks that the parts
    sum to it: a one-part reward sent as parts failed the whole batch there."""
    row = {"responses_create_params": {"input": [{"role": "user", "content": "hi"}]}}
    result = rollout_result(row, _session(tmp_path, {"session_completed": 1.0}), task_id="t")
    assert result["reward"] == 1.0 and result["mask_sample"] is False
    (sample,) = nemo_rl_judge([result], reward_penalties={"penalize_empty_final_answer": True})
    assert "error" not in sample, sample["error"]
    assert sample["total_reward"] == 0.0  # penalised: the answer has no text


def test_a_task_never_run_has_every_field_a_sessions_result_has(tmp_path):
    """The result of a task the rollout server could not run is made as the output of a session that holds nothing:
    every field and metric of a session's result is in it (`polar_side_call_chains` and `polar_grader_*` were
    missing from a hand-copied list), at zero, and masked."""
    row = {"responses_create_params": {"input": [{"role": "user", "content": "hi"}]}}
    normal = rollout_result(row, _session(tmp_path, {"session_completed": 1.0}), task_id="t")
    never = unavailable_result(row, "t", "rollout server http://x: no answer", FailureKind.TRANSPORT_UNREACHABLE)
    assert set(never) == set(normal) - {"training_traces"}  # every chain, where there are chains
    assert set(never["polar"]) == set(normal["polar"]) and set(never["response"]) == set(normal["response"])
    assert {k: never[k] for k in normal if k.startswith("polar_")} == dict.fromkeys(
        (k for k in normal if k.startswith("polar_")), 0
    )
    assert never["response"]["metadata"] == {META_TASK: "t", META_SESSION: ""} and never["polar"]["session_id"] is None
    assert never["mask_sample"] is True and never["failure_kind"] == "transport_unreachable" and never["reward"] == 0.0


def _chain(seqs: list[int], trained: int, **metadata) -> Trace:
    return Trace(
        prompt_ids=[1],
        response_ids=list(range(trained)),
        loss_mask=[1] * trained,
        response_logprobs=[-0.1] * trained,
        record_ids=[f"r{s}" for s in seqs],
        segments=[],
        metadata={"seq": seqs} | metadata,
    )


def test_the_agents_chain_is_trained_never_a_side_call_that_came_first():
    """opencode asks its session title first (call 0, 4 tokens): the agent's chain, rooted at its own first call
    (call 1), is the one trained; the title is named a side call and exported beside it."""
    title = _chain([0], 4, side_call="title")
    agent = _chain([1, 2, 3], 24)
    compacted = _chain([4, 5], 30)  # rooted after the agent's first call: never the primary
    assert primary_chain([title, agent, compacted]) == 1
    assert primary_chain([title]) is None  # only a side call: nothing of the agent's to train, masked
    assert primary_chain([_chain([0], 4), agent]) == 0  # unnamed, the first call's chain is the agent's


def test_a_harness_names_its_side_calls_by_what_their_requests_carry():
    title = {"messages": [{"role": "system", "content": "You are a title generator. You output ONLY a thread title."}]}
    agent = {"messages": [{"role": "system", "content": "You are opencode, an interactive CLI tool."}]}
    assert HARNESSES["opencode"].side_call(title) == "title"
    assert HARNESSES["opencode"].side_call(agent) is None
    assert HARNESSES["codex"].side_call(title) is None  # a harness with no side calls named has none


def test_a_row_naming_another_evaluator_takes_none_of_the_defaults_config():
    defaults = {"harness": {"name": "codex"}, "evaluator": {"kind": "swebench", "config": {"mode": "auto"}}}
    fields = {"FAIL_TO_PASS": ["tests/test_x.py::test_bug"]}
    row = {"responses_create_params": {"input": [{"role": "user", "content": "fix it"}]}, "polar": {"fields": fields}}
    same = task_from_row(row | {"polar": {"evaluator": {"kind": "swebench"}, "fields": fields}}, defaults)
    assert (same.evaluator.kind, same.evaluator.config) == ("swebench", {"mode": "auto"})
    other = task_from_row(row | {"polar": {"evaluator": {"kind": "tests"}, "fields": fields}}, defaults)
    assert (other.evaluator.kind, other.evaluator.config) == ("tests", {})
