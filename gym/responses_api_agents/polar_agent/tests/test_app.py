# SPDX-FileCopyrightText: Copyright (c) 2026 nemo_polar contributors
# SPDX-License-Identifier: Apache-2.0
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
# http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""polar_agent without a rollout server: a fake client answers with canned sessions and traces."""

from pathlib import Path
from unittest.mock import MagicMock

import pytest
from fastapi.testclient import TestClient
from nemo_gym.server_utils import ServerClient
from responses_api_agents.polar_agent.app import PolarAgent, PolarAgentConfig

from nemo_polar.errors import ControlRefused, ControlUnreachable
from nemo_polar.traces.export import write_jsonl
from nemo_polar.traces.models import Segment, Trace

ROW = {
    "responses_create_params": {"input": [{"role": "user", "content": "Say hello."}], "temperature": 1.0},
    "polar": {"task_id": "hello", "harness": {"name": "pi", "max_steps": 2}},
    "agent_ref": {"type": "responses_api_agents", "name": "polar_agent"},
    "_ng_task_index": 0,
    "_ng_rollout_index": 1,
}


def chain(prompt, calls, root_seq=0, gap=(7,)):
    """A trace: `prompt`, then each call's sampled ids with `gap` tokens (tool output) between."""
    response, mask, logprobs, segments, seqs = [], [], [], [], []
    for k, sampled in enumerate(calls):
        if k:
            response += list(gap)
            mask += [0] * len(gap)
            logprobs += [0.0] * len(gap)
        start = len(response)
        segments.append(Segment(record_id=f"r{root_seq}_{k}", start=start, end=start + len(sampled), trained=True))
        response += sampled
        mask += [1] * len(sampled)
        logprobs += [-0.5] * len(sampled)
        seqs.append(root_seq + k)
    return Trace(
        prompt_ids=prompt,
        response_ids=response,
        loss_mask=mask,
        response_logprobs=logprobs,
        record_ids=[s.record_id for s in segments],
        segments=segments,
        metadata={"seq": seqs},
    )


class FakeClient:
    def __init__(self, session):
        self.session, self.tasks = session, []

    async def submit(self, task):
        self.tasks.append(task)
        return task.task_id

    async def wait(self, task_id, timeout_s):
        if isinstance(self.session, Exception):
            raise self.session
        return self.session

    async def cancel(self, task_id):
        pass


def session(tmp_path: Path, traces, status="completed", reward=1.0, masked=False, error=None, failure_kind=None):
    path = tmp_path / "s1.jsonl"
    write_jsonl(traces, path, session_id="s1")
    result = {
        "session_id": "s1",
        "status": status,
        "reward": None if masked else reward,
        "reward_components": {} if masked else {"tests": reward},
        "masked": masked,
        "traces_path": str(path) if traces else None,
        "error": error,
        "failure_kind": failure_kind,
    }
    return {"session_id": "s1", "state": status, "result": result}


def agent(client, global_config=None, **options) -> TestClient:
    config = PolarAgentConfig(
        host="127.0.0.1",
        port=8080,
        entrypoint="",
        name="polar_agent",
        rollout_url="http://x",
        skip_verification=True,
        **options,
    )
    server_client = MagicMock(spec=ServerClient)
    if global_config is not None:
        server_client.global_config_dict = global_config
    server = PolarAgent(config=config, server_client=server_client)
    server._client = client
    return TestClient(server.setup_webserver())


def trained_calls(output):
    return [(i["prompt_token_ids"], i["generation_token_ids"]) for i in output if i.get("generation_token_ids")]


def test_run_returns_the_primary_chain_with_token_fields(tmp_path):
    fake = FakeClient(session(tmp_path, [chain([1, 2], [[3], [4, 5]])]))
    result = agent(fake).post("/run", json=ROW).json()
    (task,) = fake.tasks
    assert task.num_samples == 1 and task.instruction == "Say hello." and task.task_id.startswith("hello-")
    assert task.harness.max_steps == 2 and task.metadata["sampling"] == {"temperature": 1.0}
    assert result["reward"] == 1.0 and result["mask_sample"] is False and "reward_components" not in result  # one part
    calls = trained_calls(result["response"]["output"])  # the token fields NeMo-RL reads, one call per turn
    assert calls == [([1, 2], [3]), ([1, 2, 3, 7], [4, 5])]
    assert result["response"]["metadata"] == {"polar_task_id": task.task_id, "polar_session_id": "s1"}
    assert result["polar"]["chains"] == 1 and result["polar"]["other_chains"] == []
    (only,) = result["training_traces"]["traces"]
    assert only["token_ids"] == [1, 2, 3, 7, 4, 5] and only["loss_mask"] == [0, 0, 1, 0, 1, 1]


def test_every_chain_is_in_the_result(tmp_path):
    main = chain([1, 2], [[3], [4, 5]])
    compacted = chain([9, 9], [[6, 6, 6, 6]], root_seq=2)  # rooted later: not the task's first prompt
    result = agent(FakeClient(session(tmp_path, [main, compacted]))).post("/run", json=ROW).json()
    assert result["polar"]["primary_chain"] == 0 and result["polar"]["other_chains"] == [1]
    assert result["polar_untrained_chain_tokens"] == 4
    envelope = result["training_traces"]
    assert (envelope["schema_version"], envelope["rollout_id"], envelope["builder"]) == (1, "s1", "prefix_merging")
    second = envelope["traces"][1]
    assert second["trace_id"] == "s1:r2_0" and second["token_ids"] == [9, 9, 6, 6, 6, 6]
    assert second["sampled_spans"] == [{"model_call_id": "r2_0", "start": 2, "end": 6, "owned": True}]


@pytest.mark.parametrize(
    "kwargs, kind",
    [
        (
            {"status": "error", "error": "runtime: repo folder missing", "failure_kind": "agent_run_error"},
            "agent_run_error",
        ),
        ({"status": "timeout"}, "agent_timeout"),
        ({"masked": True, "error": "evaluation: no repo", "failure_kind": "verifier_error"}, "verifier_error"),
        # the kind is the result's field, never read back from its words
        ({"status": "error", "error": "its node went quiet", "failure_kind": "session_lost"}, "session_lost"),
        (
            {"status": "error", "error": "node lost, evaluation unreachable", "failure_kind": "agent_run_error"},
            "agent_run_error",
        ),
        (
            {"masked": True, "error": "the grader found no repository", "failure_kind": "verifier_error"},
            "verifier_error",
        ),
        ({"masked": True, "error": "evaluation: a stored result from before failure_kind"}, "agent_run_error"),
    ],
)
def test_infrastructure_failures_are_masked_not_scored(tmp_path, kwargs, kind):
    result = agent(FakeClient(session(tmp_path, [], **kwargs))).post("/run", json=ROW).json()
    assert result["mask_sample"] is True and result["instance_config"] == {"mask_sample": True}
    assert result["failure_kind"] == kind and result["reward"] == 0.0 and "reward_components" not in result
    assert trained_calls(result["response"]["output"]) == [([0], [0])]  # the placeholder: NeMo-RL must not raise


def test_an_unreachable_rollout_server_is_masked(tmp_path):
    fake = FakeClient(ControlUnreachable("POST http://x/tasks: no answer"))
    result = agent(fake).post("/run", json=ROW).json()
    assert result["mask_sample"] is True and result["failure_kind"] == "transport_unreachable"


def test_a_refused_task_is_masked_as_a_failed_request_whatever_its_words(tmp_path):
    fake = FakeClient(ControlRefused("POST http://x/tasks: 400: the upstream is unreachable", status_code=400))
    result = agent(fake).post("/run", json=ROW).json()
    assert result["mask_sample"] is True and result["failure_kind"] == "agent_request_failed"


def test_responses_is_not_offered(tmp_path):
    assert agent(FakeClient(None)).post("/v1/responses", json={"input": "hi"}).status_code == 501


def test_each_task_is_sent_to_one_of_the_policys_servers(tmp_path):
    """NeMo-RL puts its vLLM servers in the global config (`policy_base_url`): the task names one."""
    urls = ["http://10.0.0.1:3001/v1", "http://10.0.0.2:3002/v1"]
    fake = FakeClient(session(tmp_path, [chain([1, 2], [[3]])]))
    agent(fake, {"policy_base_url": urls, "policy_model_name": "Qwen/Qwen3.5-4B"}).post("/run", json=ROW)
    agent(fake, {}).post("/run", json=ROW)
    with_servers, without = fake.tasks
    assert with_servers.upstream_url in urls and without.upstream_url is None
    # ... under the name NeMo-RL serves the policy as; without one, the node asks its server
    assert with_servers.upstream_model == "Qwen/Qwen3.5-4B" and without.upstream_model is None


def test_the_samples_of_a_row_form_one_group_on_one_server(tmp_path):
    """NeMo-RL repeats a row group_size times (same _ng_task_index): one group on the rollout server, one
    inference server for all of them, early stop over the group; the same row later is a new group."""
    urls = [f"http://10.0.0.{i}:3001/v1" for i in range(8)]
    fake = FakeClient(session(tmp_path, [chain([1, 2], [[3]])]))
    client = agent(fake, {"policy_base_url": urls}, group_size=3, early_stop_k=2)
    for index in (0, 0, 0, 1, 1, 1, 0):
        client.post("/run", json=ROW | {"_ng_task_index": index})
    groups = [t.group_id for t in fake.tasks]
    assert groups[0] == groups[1] == groups[2] != groups[3] == groups[4] == groups[5] != groups[6] != groups[0]
    assert len({t.upstream_url for t in fake.tasks[:3]}) == 1 and all(t.early_stop_k == 2 for t in fake.tasks)


def test_the_rows_output_cap_reaches_every_call(tmp_path):
    fake = FakeClient(session(tmp_path, [chain([1, 2], [[3]])]))
    row = ROW | {"responses_create_params": ROW["responses_create_params"] | {"max_output_tokens": 512}}
    agent(fake).post("/run", json=row)
    assert fake.tasks[0].max_output_tokens == 512


@pytest.mark.parametrize("policy,masked", [("mask", True), ("zero", False)])
def test_an_agent_out_of_time_is_masked_or_scored_zero(tmp_path, policy, masked):
    traces = [chain([1, 2], [[3]])]
    result = agent(FakeClient(session(tmp_path, traces, status="timeout")), timeout_reward=policy).post(
        "/run", json=ROW
    )
    out = result.json()
    assert out["mask_sample"] is masked and out["reward"] == 0.0 and out["failure_kind"] == "agent_timeout"
