"""`polar learn`: GRPO steps on the tiny model through the whole system, to show the rollouts train.

A step is collect -> update -> publish. A collector (`learn/collect.py`) hands over the groups to train: every
prompt a task of `samples` sessions (a GRPO group) on the rollout server; a gateway node runs the harness (by
default the one-call `shell` agent, `examples/one_call_agent.py`) in a bubblewrap sandbox against the proxy and
vLLM; POST-RUN builds the traces and the `answer` evaluator gives the reward. The sessions become Gym `/run`
results and NeMo-RL's post-processing turns them into samples and into NeMo-RL's GRPO training batch
(`learn/data.py`). Each call's recorded logprobs are checked against a torch recompute by the weights of the
policy version that sampled it. An updater (`learn/update.py`) takes one GRPO step (`learn/policy.py`): NeMo-RL's
own advantages and `ClippedPGLossFn` under our recipe where NeMo-RL is found (`update=auto`), else our own loss.
The new weights go out through the product: the rollout server pauses every node's proxy (held and drained), vLLM
reloads the weights in place and drops its prefix cache, and the resume carries the new policy version, recorded
on every later call. A restart of vLLM is the fallback where it cannot reload in place.

The collectors: `mode=sync` waits for the step's sessions whole. `mode=async` keeps groups in flight while the
policy trains and publishes, so no step waits for its slowest session; a session may span updates, each call
trained against its recorded logprobs (NeMo-RL's loss with its importance-sampling correction), and a group older
than `max_age` updates is left out with its reason. With `rollouts=nemo_rl`, NeMo-RL's own Gym actor collects
instead: it starts Gym's servers (ours among them) from the recipe's `env.nemo_gym`, sends the rows through them and
post-processes the results, and its loss trains on its batch (`nemo_polar.env.nemo_rl_actor`); a step's rows whole
(`mode=sync`), or through NeMo-RL's `AsyncTrajectoryCollector` and replay buffer (`mode=async`).

With `rollout_url` the sessions run on that rollout server's gateway nodes instead (a Slurm job's:
`polar launch slurm --learn`), vLLM listening where they reach it (`serve_host`).

This is the CPU reference loop. Training at scale is NeMo-RL's (docs/training.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import glob
import json
import logging
import os
import re
import shutil
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import nullcontext
from pathlib import Path
from statistics import fmean
from typing import Any

from rich.console import Console

from ..cluster.topology import TOKEN_ENV
from ..contracts import EvaluatorSpec, TaskSpec
from ..env.nemo_rl_actor import GymActor, locate_actor
from ..errors import ConfigError
from ..local.vllm_server import VLLMServer
from ..nemo_rl.server import local_server
from ..paths import ROOT
from ..progress import Steps, waiting
from ..proxy.serve import free_port
from ..records import CompletionRecord
from ..server.client import RolloutAPI
from ..store import SqliteStore
from .busy import EngineBusy
from .collect import (
    AsyncRollouts,
    Collector,
    GymActorAsyncRollouts,
    GymActorRollouts,
    Records,
    StepRollouts,
    call_versions,
    session_ids,
)
from .config import FIRST_VERSION, PROMPTS, SAMPLING, SERVED_NAME, LearnConfig
from .data import batch_counts, built, gym_results, sample_counts
from .data import samples as to_samples
from .policy import Policy
from .update import NemoRLLoss, OurLoss, Updater


def learn(cfg: LearnConfig, console: Console | None = None) -> dict[str, Any]:
    console = console or Console(width=120, stderr=True)  # stdout is the summary's
    run_dir = Path(cfg.run_dir).resolve() / time.strftime("%Y%m%d-%H%M%S")
    policy_dir = run_dir / "policy"
    shutil.copytree(cfg.model, policy_dir)  # the weights vLLM serves and each step overwrites
    started = time.monotonic()
    vllm = local_server(
        cfg.serving, SAMPLING, model=policy_dir, port=free_port(), served_name=SERVED_NAME, host=cfg.serve_host,
        dev_mode=True, log_path=run_dir / "vllm.log",
    )  # fmt: skip
    with _nemo_rl(cfg, console) as nemo_rl:  # its imports run while vLLM starts
        with waiting(console, f"starting {vllm.what} (about a minute on CPU)"):
            vllm.start()
        try:
            # a launch's nodes are up already, their proxies configured with SAMPLING and FIRST_VERSION
            remote = nullcontext((cfg.rollout_url, functools.partial(_node_records, cfg.node_records)))
            with (
                _warnings_to(run_dir / "polar.log"),
                _system(cfg, vllm, run_dir) if cfg.rollout_url is None else remote as (rollout_url, records),
            ):
                summary = asyncio.run(_steps(cfg, vllm, rollout_url, records, nemo_rl, console, run_dir))
        finally:
            vllm.stop()
    summary["seconds"] = round(time.monotonic() - started, 1)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    _plot(summary, run_dir / "reward.png")
    summary["run_dir"] = str(run_dir)
    return summary


@contextlib.contextmanager
def _warnings_to(path: Path) -> Iterator[None]:
    """The run's warnings (a session's node or rollout server, the loop's) kept in its folder, beside vllm.log."""
    handler = logging.FileHandler(path)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logger = logging.getLogger("nemo_polar")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()


class _NemoRLParts:
    """What of NeMo-RL the run uses: its post-processing (`commands`, one process for the whole run; None
    without a checkout), its GRPO loss (`recipe`: the recipe and overrides it runs with; None: ours) and its Gym
    actor (`actor`, in that process, with `rollouts=nemo_rl`; started once the rollout server is up)."""

    def __init__(self, commands=None, recipe: tuple[Path, list[str]] | None = None, actor: GymActor | None = None):
        self.commands, self.recipe, self.actor = commands, recipe, actor


class _nemo_rl:  # noqa: N801 - a context manager read as a value
    """The NeMo-RL parts `cfg` asks for and this machine has; an explicit `update=nemo_rl` without them fails."""

    def __init__(self, cfg: LearnConfig, console: Console):
        self.cfg, self.console, self.served = cfg, console, None

    def __enter__(self) -> _NemoRLParts:
        from ..nemo_rl import NemoRLNotFound, locate

        if not self.cfg.nemo_rl:
            return _NemoRLParts()
        loss = self.cfg.update != "polar"
        try:
            found = locate_actor() if self.cfg.rollouts == "nemo_rl" else locate()
        except NemoRLNotFound as exc:
            if self.cfg.update == "nemo_rl" or self.cfg.rollouts == "nemo_rl":
                raise
            self.console.print(f"[yellow]{exc}: the Gym items are read directly, our own GRPO loss trains[/yellow]")
            return _NemoRLParts()
        recipe = Path(self.cfg.recipe) if Path(self.cfg.recipe).is_absolute() else ROOT / self.cfg.recipe
        if loss and not recipe.is_file():
            raise ConfigError(f"recipe {recipe} not found: NeMo-RL's loss reads its grpo and loss_fn sections")
        self.served = found.serve(*(["nemo_rl.algorithms.grpo"] if loss else [])).__enter__()
        actor = GymActor(self.served) if self.cfg.rollouts == "nemo_rl" else None
        overrides = list(self.cfg.recipe_overrides)
        if self.cfg.mode == "async":  # off-policy groups: NeMo-RL's async GRPO requires the correction
            overrides.append("loss_fn.use_importance_sampling_correction=true")
        if self.cfg.mode == "async" and actor is not None:  # NeMo-RL's own async collection, as its async recipe
            overrides += [
                "grpo.async_grpo.enabled=true",
                f"grpo.async_grpo.max_trajectory_age_steps={self.cfg.max_age}",
                "grpo.async_grpo.in_flight_weight_updates=true",  # sessions run on while the weights are published
                "policy.generation.vllm_cfg.async_engine=true",
                f"grpo.num_prompts_per_step={self.cfg.prompts}",
                f"grpo.num_generations_per_prompt={self.cfg.samples}",
            ]
        return _NemoRLParts(self.served, (recipe, overrides) if loss else None, actor)

    def __exit__(self, *exc: object) -> None:
        if self.served is not None:
            self.served.__exit__(*exc)


class _system:  # noqa: N801
    """A rollout server and one gateway node (the proxy and the staged pools) in front of vLLM, each a process of its
    own, as on a cluster: the trainer shares no GIL with them, and in an async run they are busy while it trains.
    (Its URL, the proxy's records.) Their logs: `rollout.log`, `gateway.log` in the run folder."""

    def __init__(self, cfg: LearnConfig, vllm: VLLMServer, run_dir: Path):
        self.run_dir, self.live = run_dir, []
        rollout_port, self.gateway_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{rollout_port}"
        polar = [sys.executable, "-m", "nemo_polar.cli"]
        c = cfg.capacity
        sampling = "{" + ", ".join(f"{k}: {v}" for k, v in SAMPLING.items()) + "}"
        self.rollout = [*polar, "serve-rollout", f"port={rollout_port}", f"store.path={run_dir / 'rollout.sqlite'}"]
        self.gateway = [
            *polar,
            "serve-gateway",
            f"backend={cfg.serving}",
            f"node.rollout_url={self.url}",
            f"node.public_url=http://127.0.0.1:{self.gateway_port}",
            f"node.root={run_dir / 'node'}",
            f"node.capacity={{init: {c.init}, run: {c.run}, postrun: {c.postrun}, ready: {c.ready}}}",
            f"proxy.port={self.gateway_port}",
            f"proxy.store.path={run_dir / 'records.sqlite'}",
            f"proxy.upstream.url={vllm.url}",
            f"proxy.upstream.model={SERVED_NAME}",
            f"proxy.upstream.sampling={sampling}",
            f"proxy.upstream.policy_version='{FIRST_VERSION}'",  # a string, never read as a number
        ]

    def __enter__(self) -> tuple[str, Records]:
        from .. import daemons

        env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}  # a server of the run's own: no token
        try:
            self.live.append(daemons.start(self.rollout, self.run_dir / "rollout.log", env=env))
            daemons.wait(lambda: _answers(self.url + "/health"), 60, "the rollout server")
            self.live.append(daemons.start(self.gateway, self.run_dir / "gateway.log", env=env))
            daemons.wait(lambda: "node-0" in _answers(self.url + "/nodes"), 60, "the gateway node to register")
        except BaseException:
            daemons.stop(self.live, 30)
            raise
        return self.url, functools.partial(_node_records, str(self.run_dir / "records.sqlite"))

    def __exit__(self, *exc: object) -> None:
        from .. import daemons

        daemons.stop(self.live, 30)


def _answers(url: str) -> str:
    """What `url` answers (empty: nothing yet)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()
    except OSError:
        return ""


def _node_records(pattern: str | None, sessions: set[str]) -> list[CompletionRecord]:
    """The records of `sessions` in the node stores `pattern` names (a launch's nodes: `cfg.node_records`),
    read-only."""
    out: list[CompletionRecord] = []
    for path in sorted(glob.glob(pattern or "")):
        store = SqliteStore(path, read_only=True)
        try:
            out += [r for session in sorted(sessions) for r in store.records(session)]
        finally:
            store.close()
    return out


def _tasks(cfg: LearnConfig, step: int, vllm: VLLMServer) -> list[TaskSpec]:
    # on nodes of their own, the sessions name vLLM; a node of ours already has it as its proxy's upstream
    upstream = {} if cfg.rollout_url is None else {"upstream_url": vllm.public_url, "upstream_model": SERVED_NAME}
    return [
        TaskSpec(
            task_id=f"step{step:03d}-p{i}",
            instruction=prompt,
            harness=cfg.harness,
            runtime=cfg.runtime,
            evaluator=EvaluatorSpec(kind="answer", config={"pattern": cfg.pattern}),
            num_samples=cfg.samples,
            max_output_tokens=cfg.max_tokens,
            session_timeout_s=cfg.session_timeout_s,
            agent_timeout_s=cfg.agent_timeout_s,
            **upstream,
        )
        for i, prompt in enumerate(PROMPTS[: cfg.prompts])
    ]


def _agent(cfg: LearnConfig, vllm: VLLMServer) -> dict[str, Any]:
    """Our Gym agent's task defaults for NeMo-RL's actor: what `_tasks` gives every session (the recipe's keys
    replaced), a task's samples one group, and what this run's proxy pins."""
    spec = _tasks(cfg, 0, vllm)[0]
    keys = {"harness", "runtime", "evaluator", "builder", "session_timeout_s", "agent_timeout_s"}
    backend = {"engine": cfg.serving, "sampling": SAMPLING}
    return spec.model_dump(mode="json", include=keys) | {"group_size": cfg.samples, "backend": backend}


@contextlib.asynccontextmanager
async def _actor(
    cfg: LearnConfig, vllm: VLLMServer, rollout_url: str, nemo_rl, console: Console, run_dir: Path
) -> AsyncIterator[None]:
    """NeMo-RL's Gym actor for the run's steps (`rollouts=nemo_rl`), stopped with Gym's servers after them."""
    if nemo_rl.actor is None:
        yield
        return
    with waiting(console, "starting NeMo-RL's Gym actor: Ray, Gym's head server, our Gym servers (about a minute)"):
        base_urls = [f"{vllm.public_url}/v1"]  # as NeMo-RL hands its vLLM HTTP servers to the actor
        start = functools.partial(nemo_rl.actor.start, nemo_rl.recipe, vllm.model, base_urls, SERVED_NAME)
        await asyncio.to_thread(start, rollout_url, _agent(cfg, vllm), run_dir / "gym")
    try:
        yield
    finally:
        nemo_rl.actor.stop()


async def _publish(api: RolloutAPI, vllm: VLLMServer, policy: Policy, version: int) -> None:
    """The new weights, served through the product: pause every node (drained), reload in place (or
    restart vLLM), resume with the new policy version."""
    policy.save()
    await api.pause(timeout_s=60)
    if not vllm.reload_weights():
        vllm.stop()
        vllm.start()
    await api.resume(policy_version=str(version))


@functools.cache
def _pattern_tokens(policy: Policy, pattern: str) -> list[int]:
    """The vocabulary's tokens that alone match the reward's pattern."""
    return [i for i in range(len(policy.tokenizer)) if re.search(pattern, policy.tokenizer.decode([i]))]


def _collector(cfg: LearnConfig, api: RolloutAPI, vllm: VLLMServer, records: Records, nemo_rl) -> Collector:
    prompts = list(PROMPTS[: cfg.prompts])
    if nemo_rl.actor is not None and cfg.mode == "async":
        return GymActorAsyncRollouts(api, nemo_rl.actor, prompts, cfg.samples, cfg.max_tokens, cfg.steps, cfg.max_age)
    if nemo_rl.actor is not None:
        return GymActorRollouts(api, nemo_rl.actor, prompts, cfg.samples, cfg.max_tokens)
    post = functools.partial(
        to_samples, tokenizer=vllm.model, nemo_rl=nemo_rl.commands, recipe=nemo_rl.recipe, chains=cfg.chains == "all"
    )
    if cfg.mode == "async":
        spec = functools.partial(_group, cfg, vllm)
        return AsyncRollouts(api, spec, post, records, cfg.prompts, cfg.max_age)
    return StepRollouts(api, functools.partial(_tasks, cfg, vllm=vllm), post)


def _group(cfg: LearnConfig, vllm: VLLMServer, n: int) -> TaskSpec:
    """The `n`th group an async run submits: the prompts in turn."""
    spec = _tasks(cfg, 0, vllm)[n % cfg.prompts]
    return spec.model_copy(update={"task_id": f"group{n:05d}-p{n % cfg.prompts}"})


async def _steps(
    cfg: LearnConfig, vllm: VLLMServer, rollout_url: str, records: Records, nemo_rl, console: Console, run_dir: Path
) -> dict[str, Any]:
    policy = Policy(vllm.model, cfg.lr)
    keep = cfg.max_age + 2 if cfg.mode == "async" else 1  # versions whose calls may still train, and the next
    policy.remember(0, keep)
    updater = NemoRLLoss(nemo_rl.commands) if nemo_rl.recipe is not None else OurLoss()
    history: list[dict[str, Any]] = []
    async with (
        _actor(cfg, vllm, rollout_url, nemo_rl, console, run_dir),
        RolloutAPI(rollout_url, cfg.control_token) as api,
    ):
        collector = _collector(cfg, api, vllm, records, nemo_rl)
        with Steps(console, "step", cfg.steps) as progress, EngineBusy(vllm.url) as busy:
            progress.update(0, "reward -")
            for step in range(cfg.steps):
                row = await _step(cfg, step, api, vllm, records, policy, collector, updater, busy)
                policy.remember(step + 1, keep)
                history.append(row)
                status = f"reward {row['reward']}  logprob err {row['logprob_err']:.1e}"
                progress.update(step + 1, f"{status}  trained tokens {row['trained_tokens']}  {row['seconds']} s")
                recent = history[-cfg.solved_after :] if cfg.solved_after else []
                if len(recent) == cfg.solved_after and not any(h["updated"] for h in recent):
                    break  # nothing left to learn: in every group all samples agree
            summary = _summary(history, nemo_rl, cfg)
            summary["busy"] = busy.fraction(history[0]["started"], history[-1]["ended"])
    return summary


async def _step(
    cfg: LearnConfig,
    step: int,
    api: RolloutAPI,
    vllm: VLLMServer,
    records: Records,
    policy: Policy,
    collector: Collector,
    updater: Updater,
    busy: EngineBusy,
) -> dict[str, Any]:
    """Collect, check, update, publish; what it measured."""
    t0 = time.monotonic()
    batch = await collector.collect(step)
    sampled = time.monotonic()
    trained = session_ids(batch.tasks)
    calls = records(trained)
    versions = call_versions(calls)
    prompts = [s.tokens[: s.mask.index(1)] for s in batch.samples[:: cfg.samples] if 1 in s.mask]
    row = {
        "step": step,
        "reward": round(fmean(s.reward for s in batch.samples), 4) if batch.samples else None,
        "first_token_in_pattern": round(
            policy.first_token_probability(prompts, _pattern_tokens(policy, cfg.pattern)), 4
        ),
        "answer_tokens": round(fmean(sum(s.mask) for s in batch.samples), 2) if batch.samples else None,
        # each call against the weights of the version that sampled it
        "logprob_err": policy.logprob_error(calls),
        "samples": len(batch.samples),
        "left_out": len(batch.left_out),
        "left_out_because": dict(Counter(reason[:200] for reason in batch.left_out)),
        # the policy versions that sampled what trains (synchronous: this step's weights only)
        "policy_versions": sorted({str(v) for vs in versions.values() for v in vs}, key=int),
        "ages": dict(sorted(Counter(batch.ages).items())),  # trained groups by updates since their oldest call
        "spanning": sum(len(set(vs)) > 1 for vs in versions.values()),  # sessions sampled by several versions
        "sessions_by_node": dict(Counter(str(s["node_id"]) for _, t in batch.tasks for s in t["sessions"])),
    }
    # what the rollouts hold, and what the loss sees (ours: a row per unmasked rollout; NeMo-RL's: its batch)
    held = batch.train if batch.train is not None else built(gym_results(batch.tasks)[1])
    row |= {"chains_built": held["chains_built"], "sampled_tokens": held["sampled_tokens"]}
    row |= batch_counts(batch.train) if isinstance(updater, NemoRLLoss) else sample_counts(batch.samples)
    updating = time.monotonic()
    row |= updater.update(policy, batch)
    publishing = time.monotonic()
    row["update_s"] = round(publishing - updating, 2)
    await collector.publishing()
    await _publish(api, vllm, policy, step + 1)
    await collector.published(step + 1)
    ended = time.monotonic()
    row["check_s"], row["publish_s"] = round(updating - sampled, 2), round(ended - publishing, 2)
    row["sample_s"], row["seconds"] = round(sampled - t0, 2), round(ended - t0, 2)
    row["busy"], row["started"], row["ended"] = busy.fraction(t0, ended), t0, ended
    return row


def _summary(history: list[dict[str, Any]], nemo_rl: _NemoRLParts, cfg: LearnConfig) -> dict[str, Any]:
    rewards = [h["reward"] for h in history if h["reward"] is not None]
    trained = [h for h in history if "rows" in h]
    return {
        "steps": len(history),
        "reward_first": rewards[0] if rewards else None,
        "reward_last": rewards[-1] if rewards else None,
        "max_logprob_err": max(h["logprob_err"] for h in history),
        # whose code did each part: NeMo-RL's own, or ours
        "rollouts": cfg.rollouts,
        "mode": cfg.mode,
        "serving": cfg.serving,
        "post_processing": "nemo_rl" if nemo_rl.commands is not None else "polar",
        "loss": "nemo_rl" if nemo_rl.recipe is not None else "polar",
        # NeMo-RL's actor returns each session's primary chain, as NeMo-RL's GRPO trains through Gym
        "chains": cfg.chains if nemo_rl.recipe is not None and nemo_rl.actor is None else "primary",
        # over the steps: the trained chains (every chain: all of them) and tokens (every chain: the sampled ones)
        "chains_built": sum(h["chains_built"] for h in trained),
        "chains_trained": sum(h["chains_trained"] for h in trained),
        "trained_tokens": sum(h["trained_tokens"] for h in trained),
        "sampled_tokens": sum(h["sampled_tokens"] for h in trained),
        "update_s": round(sum(h["update_s"] for h in history), 2),
        "sessions_by_node": dict(sum((Counter(h["sessions_by_node"]) for h in history), Counter())),
        # the staleness of what trained: groups by updates since their oldest call, sessions left out for it, and
        # sessions whose calls several policy versions sampled
        "ages": dict(sorted(sum((Counter(h["ages"]) for h in history), Counter()).items())),
        "stale": sum(n for h in history for why, n in h["left_out_because"].items() if why.startswith("stale")),
        "spanning": sum(h["spanning"] for h in history),
        "history": history,
    }


def _plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in summary["history"]]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.plot(steps, [h["reward"] for h in summary["history"]], marker="o", label="reward (answer holds a digit)")
    ax.plot(
        steps,
        [h["first_token_in_pattern"] for h in summary["history"]],
        marker="s",
        label="P(first answer token is a digit)",
    )
    ax.set_xlabel("GRPO step")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"polar learn: tiny model, {summary['post_processing']} post-processing, {summary['loss']} loss")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
