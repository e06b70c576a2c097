"""`polar learn`: GRPO steps on the tiny model through the whole system, to show the rollouts train.

Each step: every prompt becomes a task of `samples` sessions (a GRPO group) on the rollout server; a
gateway node runs the harness (by default the one-call `shell` agent, `examples/one_call_agent.py`) in a
bubblewrap sandbox against the proxy and vLLM; POST-RUN builds the traces and the `answer` evaluator
gives the reward. The sessions become Gym `/run` results and NeMo-RL's post-processing turns them into
samples and into NeMo-RL's GRPO training batch (`learn/data.py`); the recorded logprobs are checked against a
torch recompute; one GRPO step updates the policy (`learn/policy.py`): by NeMo-RL's own advantages and
`ClippedPGLossFn` under our recipe where NeMo-RL is found (`update=auto`), else by our own loss. The new
weights go out through the product: the rollout server pauses every node's proxy (held and drained), vLLM
reloads the weights in place and drops its prefix cache, and the resume carries the new policy version,
recorded on every later call. A restart of vLLM is the fallback where it cannot reload in place.

With `rollout_url` the sessions run on that rollout server's gateway nodes instead (a Slurm job's:
`polar launch slurm --learn`), vLLM listening where they reach it (`serve_host`). With `rollouts=nemo_rl`, NeMo-RL's
own Gym actor collects each step's rollouts instead of our client: it starts Gym's servers (ours among them) from
the recipe's `env.nemo_gym`, sends the step's rows through them and post-processes the results, and its loss trains
on its batch (`nemo_polar.env.nemo_rl_actor`).

This is the CPU reference loop. Training at scale is NeMo-RL's (docs/training.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import glob
import json
import logging
import re
import shutil
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import nullcontext
from pathlib import Path
from statistics import fmean
from typing import Any

from rich.console import Console

from ..config import ProxyConfig
from ..contracts import EvaluatorSpec, TaskSpec
from ..env.nemo_rl_actor import GymActor, locate_actor
from ..errors import ConfigError
from ..local.vllm_server import VLLMServer
from ..nemo_rl.server import local_server
from ..paths import ROOT
from ..progress import Steps, waiting
from ..proxy.app import Proxy
from ..proxy.serve import free_port
from ..records import CompletionRecord
from ..server.client import RolloutAPI
from ..server.gateway.node import GatewayNode, NodeConfig, NodeThread
from ..server.rollout import RolloutConfig, RolloutThread
from ..store import SqliteStore
from .config import FIRST_VERSION, PROMPTS, SAMPLING, SERVED_NAME, LearnConfig
from .data import batch_counts, built, gym_results, gym_rows, sample_counts, training_samples
from .data import samples as to_samples
from .policy import Policy


def learn(cfg: LearnConfig, console: Console | None = None) -> dict[str, Any]:
    console = console or Console(width=120, stderr=True)  # stdout is the summary's
    run_dir = Path(cfg.run_dir).resolve() / time.strftime("%Y%m%d-%H%M%S")
    policy_dir = run_dir / "policy"
    shutil.copytree(cfg.model, policy_dir)  # the weights vLLM serves and each step overwrites
    started = time.monotonic()
    if cfg.serving == "nemo_rl" and cfg.rollout_url is not None:  # the job's gateways are set for vLLM
        raise ConfigError("serving=nemo_rl runs with a rollout server of its own (rollout_url: null)")
    if cfg.rollouts == "nemo_rl" and (cfg.rollout_url is not None or not cfg.nemo_rl or cfg.update == "polar"):
        raise ConfigError(
            "rollouts=nemo_rl: NeMo-RL's Gym actor collects for NeMo-RL's loss (nemo_rl=true, update auto or "
            "nemo_rl) against a rollout server of this run's own (rollout_url: null)"
        )
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

        if self.cfg.update == "nemo_rl" and not self.cfg.nemo_rl:
            raise ConfigError("update=nemo_rl trains on NeMo-RL's own batches: it needs nemo_rl=true")
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
        return _NemoRLParts(self.served, (recipe, list(self.cfg.recipe_overrides)) if loss else None, actor)

    def __exit__(self, *exc: object) -> None:
        if self.served is not None:
            self.served.__exit__(*exc)


Records = Callable[[], list[CompletionRecord]]  # every call the sessions made so far


class _system:  # noqa: N801
    """A rollout server and one gateway node (the proxy and the staged pools) in front of vLLM; (its URL, the
    proxy's records)."""

    def __init__(self, cfg: LearnConfig, vllm: VLLMServer, run_dir: Path):
        port = free_port()
        self.proxy = Proxy(
            ProxyConfig.model_validate(
                {
                    "port": port,
                    "store": {"path": str(run_dir / "records.sqlite")},
                    "upstream": {
                        "url": vllm.url,
                        "engine": cfg.serving,
                        "model": SERVED_NAME,
                        "sampling": SAMPLING,
                        "policy_version": FIRST_VERSION,
                    },
                }
            )
        )
        self.rollout = RolloutThread(RolloutConfig(port=0, store={"path": str(run_dir / "rollout.sqlite")}))
        self.node_cfg = NodeConfig(
            node_id="node-0",
            rollout_url="",
            public_url=f"http://127.0.0.1:{port}",
            root=str(run_dir / "node"),
            capacity=cfg.capacity,
            heartbeat_s=2.0,
        )
        self.port = port
        self.node: NodeThread | None = None

    def __enter__(self) -> tuple[str, Records]:
        self.rollout.__enter__()
        node_cfg = self.node_cfg.model_copy(update={"rollout_url": self.rollout.url})
        self.node = NodeThread(GatewayNode(node_cfg, self.proxy), "127.0.0.1", self.port).__enter__()
        return self.rollout.url, self._records

    def _records(self) -> list[CompletionRecord]:
        self.proxy.store.flush()
        return self.proxy.store.records()

    def __exit__(self, *exc: object) -> None:
        if self.node is not None:
            self.node.__exit__(*exc)
        self.proxy.store.close()
        self.rollout.__exit__(*exc)


def _node_records(pattern: str | None) -> list[CompletionRecord]:
    """The records of the node stores `pattern` names (a launch's nodes: `cfg.node_records`), read-only."""
    out: list[CompletionRecord] = []
    for path in sorted(glob.glob(pattern or "")):
        store = SqliteStore(path, read_only=True)
        try:
            out += store.records()
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


async def _step_tasks(api: RolloutAPI, prefix: str) -> list[tuple[str, dict]]:
    """The tasks NeMo-RL's actor made on our rollout server in one step (their ids start with `prefix`), each as
    (instruction, `GET /tasks/{id}`)."""
    named = [t["task_id"] for t in await api.tasks() if t["task_id"].startswith(f"{prefix}-")]
    tasks = [await api.task(task_id) for task_id in sorted(named)]
    return [(t["spec"]["instruction"], t) for t in tasks]


async def _run_step(api: RolloutAPI, specs: list[TaskSpec]) -> list[tuple[str, dict]]:
    for spec in specs:
        await api.submit(spec)
    while True:
        tasks = [await api.task(s.task_id) for s in specs]
        if all(t["status"] != "running" for t in tasks):
            return [(s.instruction, t) for s, t in zip(specs, tasks, strict=True)]
        await asyncio.sleep(0.2)


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


async def _steps(
    cfg: LearnConfig, vllm: VLLMServer, rollout_url: str, records: Records, nemo_rl, console: Console, run_dir: Path
) -> dict[str, Any]:
    policy = Policy(vllm.model, cfg.lr)
    history: list[dict[str, Any]] = []
    async with (
        _actor(cfg, vllm, rollout_url, nemo_rl, console, run_dir),
        RolloutAPI(rollout_url, cfg.control_token) as api,
    ):
        with Steps(console, "step", cfg.steps) as progress:
            progress.update(0, "reward -")
            for step in range(cfg.steps):
                row = await _step(cfg, step, api, vllm, records, policy, nemo_rl)
                history.append(row)
                status = f"reward {row['reward']}  logprob err {row['logprob_err']:.1e}"
                progress.update(step + 1, f"{status}  trained tokens {row['trained_tokens']}  {row['seconds']} s")
                recent = history[-cfg.solved_after :] if cfg.solved_after else []
                if len(recent) == cfg.solved_after and not any(h["updated"] for h in recent):
                    break  # nothing left to learn: in every group all samples agree
    return _summary(history, nemo_rl, cfg)


async def _step(
    cfg: LearnConfig,
    step: int,
    api: RolloutAPI,
    vllm: VLLMServer,
    records: Records,
    policy: Policy,
    nemo_rl: _NemoRLParts,
) -> dict[str, Any]:
    """Sample, judge, check, update, publish; what it measured."""
    t0, since = time.monotonic(), time.time()
    if nemo_rl.actor is not None:  # NeMo-RL's Gym actor runs the step's rows through our Gym servers
        rows = gym_rows(list(PROMPTS[: cfg.prompts]), cfg.samples, cfg.max_tokens, f"step{step:03d}")
        judged, train = await asyncio.to_thread(nemo_rl.actor.rollouts, rows, cfg.samples)
        tasks = await _step_tasks(api, f"step{step:03d}")
        batch, left_out = training_samples(judged, cfg.samples)
        if train is not None:
            train |= built(gym_results(tasks)[1])
    else:
        tasks = await _run_step(api, _tasks(cfg, step, vllm))
        chains = cfg.chains == "all"
        batch, left_out, train = to_samples(tasks, vllm.model, nemo_rl.commands, nemo_rl.recipe, chains=chains)
    sampled = time.monotonic()
    prompts = [s.tokens[: s.mask.index(1)] for s in batch[:: cfg.samples] if 1 in s.mask]
    row = {
        "step": step,
        "reward": round(fmean(s.reward for s in batch), 4) if batch else None,
        "first_token_in_pattern": round(
            policy.first_token_probability(prompts, _pattern_tokens(policy, cfg.pattern)), 4
        ),
        "answer_tokens": round(fmean(sum(s.mask) for s in batch), 2) if batch else None,
        "logprob_err": policy.logprob_error(batch),
        "samples": len(batch),
        "left_out": len(left_out),
        "left_out_because": dict(Counter(reason[:200] for reason in left_out)),
        # the policy versions recorded on the calls made since the step began (a step runs between two updates)
        "policy_versions": sorted({str(r.upstream.policy_version) for r in records() if r.started_at >= since}),
        "sessions_by_node": dict(Counter(str(s["node_id"]) for _, t in tasks for s in t["sessions"])),
    }
    # what the rollouts hold, and what the loss sees (ours: a row per unmasked rollout; NeMo-RL's: its batch)
    held = train if train is not None else built(gym_results(tasks)[1])
    row |= {"chains_built": held["chains_built"], "sampled_tokens": held["sampled_tokens"]}
    row |= sample_counts(batch) if nemo_rl.recipe is None else batch_counts(train)
    updating = time.monotonic()
    if nemo_rl.recipe is None:
        row |= policy.update(batch)
    elif train is not None:  # NeMo-RL's loss on NeMo-RL's batch, computed in its process
        row |= policy.update_by(train["input_ids"], functools.partial(nemo_rl.commands.grpo_loss, train["id"]))
    else:  # no group survived post-processing
        row |= {"updated": 0.0, "loss": 0.0}
    row["update_s"] = round(time.monotonic() - updating, 2)
    await _publish(api, vllm, policy, step + 1)
    row["sample_s"], row["seconds"] = round(sampled - t0, 2), round(time.monotonic() - t0, 2)
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
