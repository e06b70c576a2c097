"""Who collects a step's rollouts: a collector hands the loop the groups it trains at each policy version.

- `StepRollouts` (`mode=sync`): the step's tasks on our rollout server, waited for whole; every group was
  sampled by the weights it trains.
- `GymActorRollouts` (`rollouts=nemo_rl`): NeMo-RL's own Gym actor runs the step's rows through our Gym servers
  and post-processes them (`nemo_polar.env.nemo_rl_actor`).
- `GymActorAsyncRollouts` (`mode=async rollouts=nemo_rl`): NeMo-RL's own asynchronous collection (its
  `AsyncTrajectoryCollector` and `ReplayBuffer`) drives its Gym actor ahead of training; each step trains the groups
  its buffer holds for it, none started more than `max_age` weight versions before (`max_trajectory_age_steps`).
- `AsyncRollouts` (`mode=async`): groups stay in flight while the policy trains and while new weights are
  published, so no step waits for its slowest session. A session may span updates: each call carries the policy
  version that sampled it and trains against its own recorded logprobs. A group is as old as its oldest call;
  one older than `max_age` updates is left out with its reason, NeMo-RL's `max_trajectory_age_steps` rule.

Each returns a `Batch`: what trains, what was left out and why, and how old each trained group is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..contracts import TaskSpec
from ..nemo_rl.wire import TrainBatch
from ..records import CompletionRecord
from ..server.client import RolloutAPI
from .data import built, gym_results, gym_rows, training_samples
from .policy import Sample

Tasks = list[tuple[str, dict[str, Any]]]  # (instruction, `GET /tasks/{id}`) of each group
# finished groups -> (samples, left out, NeMo-RL's training batch or None): NeMo-RL's post-processing or ours
PostProcess = Callable[[Tasks], tuple[list[Sample], list[str], TrainBatch | None]]
Records = Callable[[set[str]], list[CompletionRecord]]  # the calls of these proxy sessions, so far


@dataclass
class Batch:
    """One step's rollouts, on the trainer's side."""

    tasks: Tasks  # the trained groups, as the rollout server reports them
    samples: list[Sample]  # one per unmasked rollout, group order
    left_out: list[str] = field(default_factory=list)  # a reason per rollout that does not train
    train: TrainBatch | None = None  # NeMo-RL's GRPO training batch (its loss), None: ours
    ages: list[int] = field(default_factory=list)  # per trained group: updates since its oldest call


class Collector(Protocol):
    async def collect(self, step: int) -> Batch:
        """The groups to train with the weights of `step` updates (policy version `step`)."""
        ...

    async def publishing(self) -> None:
        """New weights are about to be published (NeMo-RL's collector pauses new generation starts)."""
        ...

    async def published(self, version: int) -> None:
        """The weights of policy `version` are served now (every later call is recorded with it)."""
        ...


def session_ids(tasks: Tasks) -> set[str]:
    """The proxy's sessions (what its records name) of the groups' sessions that opened one."""
    return {proxy_session(s) for _, t in tasks for s in t["sessions"]} - {None}


def proxy_session(session: dict[str, Any]) -> str | None:
    return (session.get("result") or {}).get("proxy_session_id")


def call_versions(records: list[CompletionRecord]) -> dict[str, list[int]]:
    """Each session's calls' policy versions, in call order."""
    out: dict[str, list[int]] = {}
    for r in sorted(records, key=lambda r: r.started_at):
        if r.upstream.policy_version is not None:
            out.setdefault(r.session_id, []).append(int(r.upstream.policy_version))
    return out


async def _finished(api: RolloutAPI, task_ids: list[str]) -> list[dict[str, Any]]:
    tasks = [await api.task(task_id) for task_id in task_ids]
    return [t for t in tasks if t["status"] != "running"]


class _Unmoved:
    """A collector whose groups a weight update does not touch: nothing to do around a publish."""

    async def publishing(self) -> None:
        pass

    async def published(self, version: int) -> None:
        pass


class StepRollouts(_Unmoved):
    def __init__(self, api: RolloutAPI, specs: Callable[[int], list[TaskSpec]], post: PostProcess):
        self.api, self.specs, self.post = api, specs, post

    async def collect(self, step: int) -> Batch:
        specs = self.specs(step)
        for spec in specs:
            await self.api.submit(spec)
        while len(done := await _finished(self.api, [s.task_id for s in specs])) < len(specs):
            await asyncio.sleep(0.2)
        tasks = [(s.instruction, t) for s, t in zip(specs, done, strict=True)]
        samples, left_out, train = self.post(tasks)
        return Batch(tasks, samples, left_out, train, [0] * len(tasks))


class GymActorRollouts(_Unmoved):
    def __init__(self, api: RolloutAPI, actor, prompts: list[str], samples: int, max_tokens: int):
        self.api, self.actor, self.prompts = api, actor, prompts
        self.samples, self.max_tokens = samples, max_tokens

    async def collect(self, step: int) -> Batch:
        prefix = f"step{step:03d}"
        rows = gym_rows(self.prompts, self.samples, self.max_tokens, prefix)
        judged, train = await asyncio.to_thread(self.actor.rollouts, rows, self.samples)
        # the tasks NeMo-RL's actor made on our rollout server (their ids start with the prefix)
        named = sorted(t["task_id"] for t in await self.api.tasks() if t["task_id"].startswith(f"{prefix}-"))
        tasks = [(t["spec"]["instruction"], t) for t in [await self.api.task(i) for i in named]]
        samples, left_out = training_samples(judged, self.samples)
        if train is not None:
            train |= built(gym_results(tasks)[1])
        return Batch(tasks, samples, left_out, train, [0] * len(tasks))


class AsyncRollouts(_Unmoved):
    """`groups` groups per step; `groups * (max_age + 1)` in flight at all times, the prompts in turn."""

    def __init__(
        self,
        api: RolloutAPI,
        spec: Callable[[int], TaskSpec],
        post: PostProcess,
        records: Records,
        groups: int,
        max_age: int,
    ):
        self.api, self.spec, self.post, self.records = api, spec, post, records
        self.groups, self.max_age = groups, max_age
        self.in_flight: list[str] = []  # task ids, in submission order
        # finished, not yet trained, the oldest first: each with the policy version of its oldest call (None: none)
        self.done: list[tuple[dict[str, Any], int | None]] = []
        self.submitted = 0

    async def _top_up(self) -> None:
        while len(self.in_flight) + len(self.done) < self.groups * (self.max_age + 1):
            spec = self.spec(self.submitted)
            await self.api.submit(spec)
            self.in_flight.append(spec.task_id)
            self.submitted += 1

    async def collect(self, step: int) -> Batch:
        stale: list[str] = []
        while True:
            await self._top_up()
            finished = await _finished(self.api, list(self.in_flight))
            # a finished group's calls are all recorded: its oldest version is read once
            versions = call_versions(self.records(session_ids([("", t) for t in finished]))) if finished else {}
            for task in finished:
                self.in_flight.remove(task["task_id"])
                called = [v for s in task["sessions"] for v in versions.get(proxy_session(s), [])]
                self.done.append((task, min(called, default=None)))
            fresh: list[tuple[dict[str, Any], int | None, int]] = []
            for task, oldest in self.done:
                age = step - (step if oldest is None else oldest)
                if age > self.max_age:
                    why = f"stale: sampled by policy {oldest}, {age} updates old (max_age {self.max_age})"
                    stale += [why] * len(task["sessions"])
                else:
                    fresh.append((task, oldest, age))
            self.done = [(t, oldest) for t, oldest, _ in fresh]
            if len(fresh) >= self.groups:
                break
            await asyncio.sleep(0.5)
        taken, self.done = fresh[: self.groups], self.done[self.groups :]
        tasks = [(self._instruction(t), t) for t, _, _ in taken]
        samples, left_out, train = self.post(tasks)
        await self._top_up()
        return Batch(tasks, samples, stale + left_out, train, [age for _, _, age in taken])

    @staticmethod
    def _instruction(task: dict[str, Any]) -> str:
        return task["spec"]["instruction"]


class GymActorAsyncRollouts:
    """NeMo-RL's `AsyncTrajectoryCollector` over its Gym actor, driven as `async_grpo_train` drives it: started on a
    dataloader of steps' rows, sampled from its replay buffer each step, paused and told the new weight version
    around each publish. A group's age is the number of updates since the weight version NeMo-RL started it on."""

    def __init__(
        self, api: RolloutAPI, actor, prompts: list[str], samples: int, max_tokens: int, steps: int, max_age: int
    ):
        self.api, self.actor, self.prompts = api, actor, prompts
        self.samples, self.max_tokens = samples, max_tokens
        # the dataloader: a batch per target step NeMo-RL may generate for, and as many again (its collector consumes
        # a batch it finds no target for; one that runs out of rows stops)
        self.batches = 2 * steps + max_age
        self.started = False
        self.seen: set[str] = set()
        self.named: dict[int, list[str]] = {}  # NeMo-RL's Gym task index -> our tasks (one per rollout) of its group

    async def collect(self, step: int) -> Batch:
        if not self.started:
            rows = [gym_rows(self.prompts, 1, self.max_tokens, f"batch{b:03d}") for b in range(self.batches)]
            await asyncio.to_thread(self.actor.async_start, rows)
            self.started = True
        while (sampled := await asyncio.to_thread(self.actor.async_sample, step, self.samples)) is None:
            await asyncio.sleep(0.5)
        tasks = [task for group in sampled["groups"] for task in await self._tasks(group["task_index"])]
        samples, left_out = training_samples(sampled["judged"], self.samples)
        train = sampled["train"] | built(gym_results(tasks)[1])
        ages = [step - group["generation_version"] for group in sampled["groups"]]
        return Batch(tasks, samples, left_out, train, ages)

    async def _tasks(self, task_index: int) -> Tasks:
        """The tasks NeMo-RL's actor made on our rollout server for one group: our Gym agent keeps the row's task
        index in each task's metadata."""
        while True:
            for listed in await self.api.tasks():
                if listed["task_id"].startswith("batch") and listed["task_id"] not in self.seen:
                    index = (await self.api.task(listed["task_id"]))["spec"]["metadata"]["gym"]["_ng_task_index"]
                    self.named.setdefault(int(index), []).append(listed["task_id"])
                    self.seen.add(listed["task_id"])
            if len(self.named.get(task_index, [])) >= self.samples:
                break
            await asyncio.sleep(0.2)
        tasks = [await self.api.task(i) for i in sorted(self.named.pop(task_index))]
        return [(t["spec"]["instruction"], t) for t in tasks]

    async def publishing(self) -> None:
        await asyncio.to_thread(self.actor.async_refit, "prepare")

    async def published(self, version: int) -> None:
        await asyncio.to_thread(self.actor.async_refit, "done", version)
