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
"""polar_agent: NeMo Gym's `/run` for a nemo_polar session (the external-agent-loop pattern).

One `/run` = one dataset row = ONE session (num_samples=1; Gym and NeMo-RL repeat the row for the
GRPO group). The row becomes a task on our rollout server; a gateway node runs the real harness in
a sandbox against the token-faithful proxy, builds the traces and evaluates. This server waits for
the session, then answers with a Gym result whose output items carry `prompt_token_ids`,
`generation_token_ids` and `generation_log_probs`. The reward comes from the resources server's
`/verify` (`resources_servers/polar`), which reads the same session's evaluation; infrastructure
failures come back masked (`mask_sample`), never scored 0. The logic lives in
`nemo_polar.env.gym`; this file only adapts it to Gym's base classes.

Multi-chain sessions (compaction, sub-agents, side calls): the primary chain, the one rooted at the agent's
first model call with the most trained tokens, is the response (see `nemo_polar.env.gym.primary_chain`); every
chain is in the result's `training_traces`, Gym's envelope, each sampled span owned by one chain.
"""

import asyncio
import logging
from typing import Any, ClassVar, Literal

from fastapi import HTTPException, Request
from nemo_gym.base_resources_server import BaseRunRequest, BaseVerifyResponse
from nemo_gym.base_responses_api_agent import BaseResponsesAPIAgentConfig, SimpleResponsesAPIAgent
from nemo_gym.config_types import ModelServerRef, ResourcesServerRef
from nemo_gym.openai_utils import NeMoGymResponse, NeMoGymResponseCreateParamsNonStreaming
from nemo_gym.server_utils import get_response_json, is_nemo_gym_fastapi_entrypoint
from pydantic import ConfigDict, PrivateAttr

from nemo_polar.env import gym as polar_gym

log = logging.getLogger("polar_agent")


class PolarAgentConfig(BaseResponsesAPIAgentConfig):
    rollout_url: str
    control_token: str | None = None
    resources_server: ResourcesServerRef | None = None
    # The policy as Gym serves it (NeMo-RL: `policy_model`); passed to the task as metadata.
    model_server: ModelServerRef | None = None
    # The global-config key holding the policy's inference servers. NeMo-RL sets `policy_base_url`
    # to its vLLM HTTP servers (one per DP rank), known only once it runs: each task names one of
    # them (stable per task), and the node's proxy sends that session's calls there. Absent: the
    # nodes' own upstream.
    upstream_key: str | None = "policy_base_url"
    # The global-config key holding the name those servers serve the policy under (NeMo-RL sets
    # `policy_model_name` to `policy.model_name`); absent: the name the server's /v1/models lists.
    upstream_model_key: str | None = "policy_model_name"
    # Task defaults; a row's `polar` block overrides them key by key.
    harness: dict[str, Any] = {"name": "pi", "max_steps": 20}
    runtime: dict[str, Any] = {}
    builder: str = "prefix_tree"
    evaluator: dict[str, Any] = {}
    session_timeout_s: float = 1800
    agent_timeout_s: float = 1200
    budget: dict[str, Any] = {}  # what each session may spend: {calls, tokens, on_spent: mask | score}
    # What the node's proxy pins (conf/backend): checked against the row's pair, which NeMo-RL sets.
    backend: dict[str, Any] = {}
    # GRPO groups: NeMo-RL repeats each row `group_size` times (recipe: ${grpo.num_generations_per_prompt});
    # the samples of a row become one group on the rollout server, sent to one inference server, and
    # `early_stop_k` cancels the group's stragglers (masked) once k of its samples completed.
    group_size: int | None = None
    early_stop_k: int | None = None
    timeout_reward: Literal["mask", "zero"] = "mask"  # an agent out of time: masked, or reward 0 that trains
    poll_interval_s: float = 1.0
    wait_grace_s: float = 120.0  # waited past session_timeout_s before the rollout is masked
    concurrency: int = 512


class PolarRunRequest(BaseRunRequest):
    model_config = ConfigDict(extra="allow")


class PolarVerifyResponse(BaseVerifyResponse):
    model_config = ConfigDict(extra="allow")


class PolarAgent(SimpleResponsesAPIAgent):
    ray_enabled: ClassVar[bool] = False  # Gym 0.7.0 reads it; 0.5.1 has no such attribute
    config: PolarAgentConfig
    _client: Any = PrivateAttr(default=None)
    _sem: Any = PrivateAttr(default=None)
    _groups: Any = PrivateAttr(default=None)

    def model_post_init(self, __context: Any) -> None:
        self._client = polar_gym.RolloutClient(
            self.config.rollout_url, self.config.control_token, self.config.poll_interval_s
        )
        self._sem = asyncio.Semaphore(self.config.concurrency)
        self._groups = polar_gym.Groups(self.config.group_size)

    async def responses(self, body: NeMoGymResponseCreateParamsNonStreaming) -> NeMoGymResponse:
        raise HTTPException(501, "polar_agent runs whole sessions through /run; the harness owns the model loop")

    @property
    def _skip_verification(self) -> bool:
        return bool(getattr(self.config, "skip_verification", False))  # Gym 0.7.0's key; 0.5.1 has none

    def _task_defaults(self) -> dict[str, Any]:
        c = self.config
        return {
            "harness": c.harness,
            "runtime": c.runtime or None,
            "builder": c.builder,
            "evaluator": c.evaluator or None,
            "session_timeout_s": c.session_timeout_s,
            "agent_timeout_s": c.agent_timeout_s,
            "budget": c.budget or None,
            "metadata": {"policy_model": c.model_server.name} if c.model_server else {},
        }

    def _global(self, key: str | None) -> Any:
        config = getattr(self.server_client, "global_config_dict", None) or {}  # absent in Gym's test mocks
        return config.get(key) if key else None

    def _upstreams(self) -> list[str]:
        value = self._global(self.config.upstream_key)
        return [value] if isinstance(value, str) else [str(v) for v in value or []]

    def _check_sampling(self, row: dict[str, Any]) -> None:
        pinned = (self.config.backend or {}).get("sampling") or {}
        params = row.get("responses_create_params") or {}
        for key in ("temperature", "top_p"):
            if key in pinned and params.get(key) is not None and float(params[key]) != float(pinned[key]):
                log.warning(
                    "row asks %s=%s, the proxy pins %s (the pinned value is used)", key, params[key], pinned[key]
                )

    async def run(self, request: Request, body: PolarRunRequest) -> PolarVerifyResponse:
        row = body.model_dump(mode="json", by_alias=True, exclude_none=True)
        row.update(body.model_extra or {})
        async with self._sem:
            result = await self._run(request, row)
        return PolarVerifyResponse.model_validate(result)

    async def _run(self, request: Request, row: dict[str, Any]) -> dict[str, Any]:
        try:
            task = polar_gym.task_from_row(row, self._task_defaults())
        except ValueError as exc:  # a malformed row: the task cannot even be stated
            return polar_gym.unavailable_result(
                row, "invalid-row", f"invalid row: {exc}", polar_gym.FailureKind.AGENT_REQUEST_FAILED
            )
        self._check_sampling(row)
        task.group_id = self._groups.of(row)
        task.early_stop_k = self.config.early_stop_k if task.group_id else None
        # the group's samples share one server: their common prompt stays in its prefix cache
        task.upstream_url = polar_gym.pick_upstream(self._upstreams(), task.group_id or task.task_id)
        if task.upstream_url and self._global(self.config.upstream_model_key):
            task.upstream_model = str(self._global(self.config.upstream_model_key))
        cookies = await self._seed(request, row)
        try:
            await self._client.submit(task)
            session = await self._client.wait(task.task_id, task.session_timeout_s + self.config.wait_grace_s)
        except polar_gym.RolloutUnavailable as exc:
            await self._client.cancel(task.task_id)
            return polar_gym.unavailable_result(row, task.task_id, str(exc), polar_gym.unavailable_kind(exc))
        out = polar_gym.rollout_output(session, task_id=task.task_id, builder=task.builder)
        judged = await self._verify(row, out.response, session, cookies)
        return polar_gym.assemble(row, out, polar_gym.timeout_policy(judged, self.config.timeout_reward))

    async def _seed(self, request: Request, row: dict[str, Any]) -> Any:
        if self.config.resources_server is None or self._skip_verification:
            return request.cookies
        r = await self.server_client.post(
            server_name=self.config.resources_server.name, url_path="/seed_session", json=row, cookies=request.cookies
        )
        return r.cookies if r.ok else request.cookies

    async def _verify(
        self, row: dict[str, Any], response: dict[str, Any], session: dict[str, Any], cookies: Any
    ) -> polar_gym.Verdict:
        """The resources server's verdict; the session's own when verification is off or fails."""
        if self._skip_verification or self.config.resources_server is None:
            return polar_gym.verdict(session)
        try:
            r = await self.server_client.post(
                server_name=self.config.resources_server.name,
                url_path="/verify",
                json={**row, "response": response},
                cookies=cookies,
            )
            data = await get_response_json(r)
            if not r.ok:
                raise RuntimeError(f"/verify answered {r.status}: {str(data)[:300]}")
        except Exception as exc:  # noqa: BLE001 - any verify failure is an infrastructure failure
            return polar_gym.masked("verifier_error", f"{type(exc).__name__}: {exc}")
        return polar_gym.Verdict(
            reward=float(data["reward"]),
            mask_sample=bool(data.get("mask_sample")),
            failure_kind=data.get("failure_kind"),
            failure_reason=data.get("failure_reason"),
            reward_components=data.get("reward_components") or {},
        )


if __name__ == "__main__":
    PolarAgent.run_webserver()
elif is_nemo_gym_fastapi_entrypoint(__file__):
    app = PolarAgent.run_webserver()  # noqa: F401
