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
"""polar: the resources server of nemo_polar rollouts.

`/verify` returns the reward our evaluator gave the rollout's session. The evaluator runs on the
gateway node right after the agent (it needs the sandbox's working copy), so verifying is reading
that result back from the rollout server: the session is named in the response's metadata
(`polar_task_id`), which polar_agent sets. Infrastructure failures (the session did not complete,
the evaluator could not judge, the rollout server is unreachable) are masked, never scored 0.

It runs under Gym 0.5.1 (what NeMo-RL pins) and 0.7.0. Where Gym 0.7.0 has typed resources
sessions, `/seed_session` and `/close_session` keep its contract: a typed seed is idempotent (the
same request twice gives the same answer), a close is idempotent and also succeeds for a session
never seeded, and a seed after its close is refused. The legacy seed an agent's `/run` sends (the
row), the only kind 0.5.1 has, keeps no state and answers `{}`.
"""

from typing import Any, ClassVar

from fastapi import HTTPException
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from nemo_gym.server_utils import is_nemo_gym_fastapi_entrypoint
from pydantic import ConfigDict, PrivateAttr

from nemo_polar.env import gym as polar_gym

try:  # Gym 0.7.0's typed resources sessions
    from nemo_gym.base_resources_server import (
        ResourcesCloseSessionRequest,
        ResourcesCloseSessionResponse,
        ResourcesSeedSessionRequest,
        ResourcesSeedSessionResponse,
    )

    TYPED_SESSIONS = True
except ImportError:  # Gym 0.5.1: the legacy seed only (SimpleResourcesServer's own)
    TYPED_SESSIONS = False


class PolarResourcesServerConfig(BaseResourcesServerConfig):
    rollout_url: str
    control_token: str | None = None
    verify_wait_s: float = 60.0  # a verify that arrives before the session is final waits this long


class PolarVerifyRequest(BaseVerifyRequest):
    model_config = ConfigDict(extra="allow")


class PolarVerifyResponse(BaseVerifyResponse):
    model_config = ConfigDict(extra="allow")


class PolarResourcesServer(SimpleResourcesServer):
    ray_enabled: ClassVar[bool] = False  # Gym 0.7.0 reads it; 0.5.1 has no such attribute
    config: PolarResourcesServerConfig
    _client: Any = PrivateAttr(default=None)
    _seeded: dict[str, dict[str, Any]] = PrivateAttr(default_factory=dict)
    _closed: set[str] = PrivateAttr(default_factory=set)

    def model_post_init(self, __context: Any) -> None:
        self._client = polar_gym.RolloutClient(self.config.rollout_url, self.config.control_token)

    if TYPED_SESSIONS:

        async def seed_session(
            self, body: ResourcesSeedSessionRequest | BaseSeedSessionRequest
        ) -> ResourcesSeedSessionResponse | BaseSeedSessionResponse:
            if not isinstance(body, ResourcesSeedSessionRequest):
                return BaseSeedSessionResponse()
            sid = body.resources_session_id
            if sid in self._closed:
                raise HTTPException(409, f"resources session {sid} is closed")
            seed = body.model_dump(mode="json")
            if self._seeded.setdefault(sid, seed) != seed:
                raise HTTPException(409, f"resources session {sid} is already seeded with another request")
            return ResourcesSeedSessionResponse(resources_session_id=sid)

        async def close_resources_session(self, body: ResourcesCloseSessionRequest) -> ResourcesCloseSessionResponse:
            self._seeded.pop(body.resources_session_id, None)
            self._closed.add(body.resources_session_id)
            return ResourcesCloseSessionResponse(resources_session_id=body.resources_session_id)

    async def verify(self, body: PolarVerifyRequest) -> PolarVerifyResponse:
        task_id = (body.response.metadata or {}).get(polar_gym.META_TASK)
        if not task_id:
            verdict = polar_gym.masked("verifier_error", "the response names no polar task (metadata.polar_task_id)")
        else:
            try:
                session = await self._client.wait(task_id, self.config.verify_wait_s)
                verdict = polar_gym.verdict(session)
            except polar_gym.RolloutUnavailable as exc:
                verdict = polar_gym.masked("verifier_error", str(exc))
        return PolarVerifyResponse(**body.model_dump(), **verdict.fields())


if __name__ == "__main__":
    PolarResourcesServer.run_webserver()
elif is_nemo_gym_fastapi_entrypoint(__file__):
    app = PolarResourcesServer.run_webserver()  # noqa: F401
