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
"""The polar resources server: /verify against a fake rollout server client, under Gym 0.5.1 and 0.7.0;
Gym 0.7.0's resources-session contract where that Gym has it."""

from unittest.mock import MagicMock

import pytest
from fastapi.testclient import TestClient
from nemo_gym.server_utils import ServerClient
from resources_servers.polar.app import TYPED_SESSIONS, PolarResourcesServer, PolarResourcesServerConfig

from nemo_polar.env import gym as polar_gym
from nemo_polar.traces.export import gym_masked_response


class FakeClient:
    def __init__(self, sessions):
        self.sessions = sessions

    async def wait(self, task_id, timeout_s):
        if task_id not in self.sessions:
            raise polar_gym.RolloutUnavailable(f"GET /tasks/{task_id} answered 404")
        return self.sessions[task_id]


def server(sessions=None) -> PolarResourcesServer:
    config = PolarResourcesServerConfig(
        host="127.0.0.1", port=8080, entrypoint="", name="polar", rollout_url="http://x"
    )
    s = PolarResourcesServer(config=config, server_client=MagicMock(spec=ServerClient))
    s._client = FakeClient(sessions or {})
    return s


typed_sessions = pytest.mark.skipif(not TYPED_SESSIONS, reason="this Gym (0.5.1) has no typed resources sessions")


def seed(sid="rs-1"):
    from nemo_gym.base_resources_server import ResourcesSeedSessionRequest
    from nemo_gym.episode_types import EpisodeId, TaskId

    return ResourcesSeedSessionRequest(
        resources_session_id=sid,
        episode_id=EpisodeId(rollout_id="r1", attempt=0),
        task_id=TaskId(taskset="polar", task_id="hello"),
        task_data={"instruction": "Say hello."},
    )


@typed_sessions
def test_session_contract():
    from nemo_gym.testing.session_conformance import check_resources_session_contract

    check_resources_session_contract(server().setup_webserver(), seed(), keeps_state=True)


def test_the_legacy_seed_keeps_no_state():
    client = TestClient(server().setup_webserver())
    assert client.post("/seed_session", json={"responses_create_params": {"input": []}}).json() == {}


@typed_sessions
def test_seed_and_close_are_idempotent():
    client = TestClient(server().setup_webserver())
    body = seed().model_dump(mode="json")
    first, second = client.post("/seed_session", json=body), client.post("/seed_session", json=body)
    assert first.status_code == second.status_code == 200 and first.json() == second.json()
    close = {"resources_session_id": "rs-1", "episode_id": body["episode_id"]}
    a, b = client.post("/close_session", json=close), client.post("/close_session", json=close)
    assert a.status_code == b.status_code == 200 and a.json() == b.json() == {"resources_session_id": "rs-1"}


def verify_body(task_id):
    response = gym_masked_response(response_id="resp_x")
    response["metadata"] = {polar_gym.META_TASK: task_id} if task_id else {}
    return {"responses_create_params": {"input": [{"role": "user", "content": "Say hello."}]}, "response": response}


def done(status="completed", reward=1.0, masked=False, error=None, failure_kind=None):
    result = {"status": status, "reward": reward, "reward_components": {"a": 0.25, "b": reward - 0.25}}
    failure = {"masked": masked, "error": error, "failure_kind": failure_kind}
    return {"session_id": "s", "state": status, "result": result | failure}


def test_verify_returns_the_evaluator_reward():
    client = TestClient(server({"t1": done(reward=0.75)}).setup_webserver())
    body = verify_body("t1")  # one body: its response's created_at is the second it was made
    out = client.post("/verify", json=body).json()
    assert out["reward"] == 0.75 and out["mask_sample"] is False and out["reward_components"] == {"a": 0.25, "b": 0.5}
    assert client.post("/verify", json=body).json() == out  # verifying twice: the same answer


def test_verify_masks_infrastructure_failures():
    """The kind is the session result's field, set where the failure happened: its words do not decide it."""
    sessions = {
        "lost": done("error", 0.0, True, "its node went quiet", "session_lost"),
        "bad": done(masked=True, error="the grader found no repository", failure_kind="verifier_error"),
        "run": done("error", 0.0, True, "node lost during evaluation", "agent_run_error"),
    }
    client = TestClient(server(sessions).setup_webserver())
    expected = [
        ("lost", "session_lost"),
        ("bad", "verifier_error"),
        ("run", "agent_run_error"),
        ("nope", "verifier_error"),
        (None, "verifier_error"),
    ]
    for task_id, kind in expected:
        out = client.post("/verify", json=verify_body(task_id)).json()
        assert out["mask_sample"] is True and out["instance_config"] == {"mask_sample": True}, task_id
        assert out["failure_kind"] == kind and out["reward"] == 0.0, task_id
