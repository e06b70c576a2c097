"""`polar up`: the whole system on one machine, on a dataset.

vLLM serves the tiny model (or any upstream you name), a rollout server keeps every task, session
and result in SQLite, and one gateway node (the proxy and the staged pools) runs each harness in a
sandbox. Every dataset row becomes one task per harness, `num_samples` sessions each (a GRPO
group). The run folder keeps the stores, each session's traces and a results JSONL.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections import Counter
from pathlib import Path
from statistics import fmean
from typing import Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from rich.console import Console
from rich.table import Table

from ..config import ProxyConfig, Strict
from ..contracts import EvaluatorSpec, HarnessSpec, NodeCapacity, RuntimeSpec, SessionBudget, TaskSpec
from ..errors import ConfigError, problems
from ..local.vllm_server import VLLMServer
from ..nemo_rl.server import local_server
from ..progress import Steps, waiting
from ..proxy.app import Proxy
from ..proxy.backends import BACKENDS
from ..proxy.serve import free_port
from ..rollup import kept
from ..server.client import RolloutAPI
from ..server.gateway.node import GatewayNode, NodeConfig, NodeThread
from ..server.rollout import RolloutConfig, RolloutThread
from ..traces import BUILDERS

BUNDLED = "bundled"
BUNDLED_HARBOR = "bundled-harbor"


class VLLMConfig(Strict):
    start: bool = Field(True, description="start vLLM on `model` for the run; false: use proxy.upstream.url as it is")
    port: int = Field(8801, description="the port the started vLLM listens on")
    model: str = Field(".deps/models/tiny", description="the model folder (or Hugging Face name) vLLM serves")
    timeout_s: float = Field(300, description="seconds vLLM may take to answer its health check before the run stops")


class NodeSection(Strict):
    capacity: NodeCapacity = NodeCapacity()


class DatasetConfig(Strict):
    """`conf/dataset/*.yaml`; `dataset=FILE.jsonl` sets `path`."""

    path: str = Field(
        BUNDLED,
        description=f"a JSONL file, a folder of Harbor tasks, {BUNDLED!r}: the bundled task set, built in the run "
        f"folder, or {BUNDLED_HARBOR!r}: the bundled Harbor-format tasks",
    )
    format: Literal["auto", "instruction", "swe", "gym", "harbor"] = Field(
        "auto",
        description="instruction: rows {instruction, fields}; swe: SWE-bench rows; gym: NeMo Gym rows (their polar "
        "block); harbor: Harbor task folders; auto: a folder is Harbor's, a file by its first row",
    )
    limit: int | None = Field(None, ge=1, description="only the first rows")


class BuilderConfig(Strict):
    """`conf/builder/*.yaml`: how a session's records become traces."""

    kind: str = Field("prefix_tree", description="per_request, prefix_tree, or 'package.module:Class'")
    max_tokens: int | None = Field(None, gt=0, description="length policy: keep the causal prefix")

    @field_validator("kind")
    @classmethod
    def _known(cls, kind: str) -> str:
        return BUILDERS.check(kind)


class RuntimeBase(RuntimeSpec):
    """`polar up`'s runtime block: a base each row completes (`runtime=docker` with no image is whole once a Harbor
    task adds its own build, or a SWE row its instance image), so its kind's settings are checked whole per row
    (`complete`), their names here."""

    @model_validator(mode="after")
    def _settings_fit(self, info: ValidationInfo) -> RuntimeBase:
        unknown = sorted(set(self.options) - set(self.kinds[self.kind].Settings.model_fields))
        if unknown:
            raise ValueError(f"runtime.{unknown[0]}: not a setting of runtime {self.kind!r}")
        return self


class UpConfig(Strict):
    run_dir: str = Field(
        "runs/up", description="each run writes a folder of its own in it, named by its start time (stores, logs)"
    )
    dataset: DatasetConfig = Field(description="the rows to run (dataset=bundled|smoke|harbor, or dataset=FILE.jsonl)")
    harnesses: list[HarnessSpec] = Field(
        min_length=1, description="the harnesses every row runs with, one task per row and harness"
    )
    harness: HarnessSpec | None = Field(None, description="set: run this one harness instead of `harnesses`")
    runtime: RuntimeBase = Field(
        default_factory=RuntimeBase,
        description="the runtime block each row completes (a SWE row's image, a Harbor task's own Dockerfile), "
        "checked whole once completed",
    )
    builder: BuilderConfig = Field(BuilderConfig(), description="how each session's records become traces")
    evaluator: EvaluatorSpec = Field(
        default_factory=EvaluatorSpec, description="how each session is graded into its reward"
    )
    num_samples: int = Field(2, ge=1, description="sessions per task: the GRPO group of each row and harness")
    max_steps: int | None = Field(
        None,
        ge=1,
        description="set: every harness's step limit; null: each harness's own (`harness.max_steps`). A harness "
        "that does not stop itself there (codex, pi, opencode, shell) is held to that many model calls",
    )
    budget: SessionBudget = Field(
        default_factory=SessionBudget, description="what each session may spend: calls, sampled tokens, on_spent"
    )
    session_timeout_s: float = Field(
        600, gt=0, description="seconds a session may take from set-up to its reward (a Harbor task's own, if longer)"
    )
    agent_timeout_s: float = Field(
        300, gt=0, description="seconds the harness itself may run (a Harbor task's own agent timeout wins)"
    )
    vllm: VLLMConfig = VLLMConfig()
    node: NodeSection = NodeSection()
    proxy: ProxyConfig = Field(ProxyConfig(), description="the gateway node's proxy, between the harnesses and vLLM")


Row = tuple[str, str, dict, RuntimeSpec, dict]  # id, instruction, fields, runtime, the row's own TaskSpec keys


def complete(block: RuntimeSpec | dict, where: str) -> RuntimeSpec:
    """A row's runtime block, checked whole (its kind's settings): a ConfigError naming the row otherwise."""
    data = block.model_dump(exclude_defaults=True) if isinstance(block, RuntimeSpec) else block
    try:
        return RuntimeSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{where}: " + "; ".join(problems(exc, whole="runtime"))) from None


def _rows(cfg: UpConfig, run_dir: Path) -> list[Row]:
    """(id, instruction, fields, runtime, task keys) per dataset row."""
    path, limit = Path(cfg.dataset.path), cfg.dataset.limit
    if cfg.dataset.path == BUNDLED_HARBOR:
        from ..tasks.harbor import BUNDLED as path
    if cfg.dataset.format == "harbor" or (cfg.dataset.format == "auto" and path.is_dir()):
        return _harbor_rows(cfg, path, run_dir / "harbor")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()][:limit]
    swe = cfg.dataset.format == "swe" or (cfg.dataset.format == "auto" and rows and "instance_id" in rows[0])
    if swe:
        from ..tasks.dataset import parse_row

        out = []
        for i, data in enumerate(rows):
            row = parse_row(data, f"{path}:{i + 1}")
            runtime = complete(row.runtime(cfg.runtime), f"{path}:{i + 1}")  # local: repo_path; else its image
            out.append((row.instance_id, row.problem_statement, row.model_dump(mode="json"), runtime, {}))
        return out
    if cfg.dataset.format == "gym" or (cfg.dataset.format == "auto" and rows and "responses_create_params" in rows[0]):
        return _gym_rows(cfg, rows)
    runtime = complete(cfg.runtime, str(path))
    return [
        (r.get("fields", {}).get("id", i), r["instruction"], r.get("fields", {}), runtime, {})
        for i, r in enumerate(rows)
    ]


def _gym_rows(cfg: UpConfig, rows: list[dict]) -> list[Row]:
    """NeMo Gym rows, read as our Gym agent reads them in training (`env.gym.task_from_row`): the `polar` block's
    runtime over this run's, its fields; the evaluator stays this run's (`evaluator=`)."""
    from ..env.gym import task_from_row

    out = []
    for i, row in enumerate(rows):
        harness = (cfg.harness or cfg.harnesses[0]).model_dump()  # each of the run's harnesses runs the row
        task = task_from_row(row, {"harness": harness, "runtime": cfg.runtime.model_dump(exclude_defaults=True)})
        row_id = (row.get("polar") or {}).get("task_id") or str(i)
        out.append((row_id, task.instruction, task.fields, task.runtime, {}))  # checked whole as the task's
    return out


def _harbor_rows(cfg: UpConfig, path: Path, copies: Path) -> list[Row]:
    """Harbor task folders: each task's working copy (what its Dockerfile copies into its workdir) under
    `copies`, its runtime, and its own agent timeout (the session's grown to fit it and the verifier's)."""
    from ..tasks.harbor import load_dataset

    if cfg.evaluator.kind in ("tests", "swebench"):
        raise ConfigError(f"a Harbor dataset is graded by its own tests: evaluator=harbor, not {cfg.evaluator.kind}")
    out = []
    for task in load_dataset(path)[: cfg.dataset.limit]:
        dest = copies / task.task_id
        shutil.rmtree(dest, ignore_errors=True)
        runtime = complete(task.runtime(cfg.runtime, task.working_copy(dest)), task.path)
        agent_s = task.config.agent.timeout_sec or cfg.agent_timeout_s
        session_s = max(cfg.session_timeout_s, agent_s + task.config.verifier.timeout_sec + 120)
        keys = {"agent_timeout_s": agent_s, "session_timeout_s": session_s}
        out.append((task.task_id, task.instruction, task.fields(), runtime, keys))
    return out


def tasks(cfg: UpConfig, run_dir: Path | None = None) -> list[TaskSpec]:
    out = []
    harnesses = [cfg.harness] if cfg.harness is not None else cfg.harnesses
    for row_id, instruction, fields, runtime, keys in _rows(cfg, run_dir or Path(cfg.run_dir)):
        for h in harnesses:
            variant = h.options.get("dialect")  # pi on each of its wire APIs: one task each
            name = h.name + (f"-{variant}" if variant else "")
            out.append(
                TaskSpec(
                    task_id=f"{row_id}-{name}",
                    instruction=instruction,
                    fields=fields,
                    harness=h if cfg.max_steps is None else h.model_copy(update={"max_steps": cfg.max_steps}),
                    runtime=runtime,
                    builder=cfg.builder.kind,
                    evaluator=cfg.evaluator,
                    num_samples=cfg.num_samples,
                    budget=cfg.budget,
                    **({"session_timeout_s": cfg.session_timeout_s, "agent_timeout_s": cfg.agent_timeout_s} | keys),
                )
            )
    return out


def up(cfg: UpConfig, console: Console | None = None) -> dict:
    console = console or Console(width=120)
    run_dir = Path(cfg.run_dir).resolve() / time.strftime("%Y%m%d-%H%M%S")
    vllm = _server(cfg, run_dir) if cfg.vllm.start else None  # one this machine cannot start: refused before all
    run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.dataset.path == BUNDLED:
        from ..tasks.materialize import build

        built = cfg.dataset.model_copy(update={"path": str(build(run_dir / "tasks"))})
        cfg = cfg.model_copy(update={"dataset": built})
    specs = tasks(cfg, run_dir)
    proxy_cfg = cfg.proxy
    engine = proxy_cfg.upstream.engine  # backend=nemo_rl: NeMo-RL's own server, over the vLLM it pins
    try:
        if vllm is not None:
            with waiting(console, f"starting {vllm.what} on {cfg.vllm.model} (about a minute on CPU)"):
                vllm.start(cfg.vllm.timeout_s)
            # the name: from /v1/models, where the server lists one
            named = {} if BACKENDS[engine].lists_models else {"model": proxy_cfg.upstream.model or vllm.served_name}
            upstream = proxy_cfg.upstream.model_copy(update={"url": vllm.url} | named)
            proxy_cfg = proxy_cfg.model_copy(update={"upstream": upstream})
        summary = _run(cfg, specs, proxy_cfg, run_dir, console)
    finally:
        if vllm is not None:
            vllm.stop()
    console.print(_table(summary))
    if summary["budget_spent"]:
        console.print(f"[yellow]{_budget_note(summary, specs)}[/yellow]")
    console.print(f"run folder: {run_dir}")
    return summary


def _budget_note(summary: dict, specs: list[TaskSpec]) -> str:
    """What to say when sessions were cut by their budget: how many, at what, and what sets it."""
    calls = sorted({b for b in (s.call_budget for s in specs) if b is not None})
    tokens = sorted({s.budget.tokens for s in specs if s.budget.tokens is not None})
    at = ", ".join([f"{b} call{'s' * (b != 1)}" for b in calls] + [f"{t} sampled tokens" for t in tokens])
    return (
        f"{summary['budget_spent']} of {summary['sessions']} sessions ended budget_spent (at {at}): their agent "
        "was stopped there. Raise it with harness.max_steps (a harness that does not stop itself is held to it), "
        "max_steps (every harness), or budget.calls / budget.tokens"
    )


def _server(cfg: UpConfig, run_dir: Path) -> VLLMServer:
    """The inference server `vllm.start` starts for the proxy's engine (nothing runs yet)."""
    upstream = cfg.proxy.upstream
    try:
        return local_server(
            upstream.engine, upstream.sampling, model=Path(cfg.vllm.model), port=cfg.vllm.port,
            log_path=run_dir / "vllm.log",
        )  # fmt: skip
    except ValueError as exc:
        raise ConfigError(f"{exc} (vllm.start=false proxy.upstream.url=URL)") from None


def _run(cfg: UpConfig, specs: list[TaskSpec], proxy_cfg: ProxyConfig, run_dir: Path, console: Console) -> dict:
    port = proxy_cfg.port or free_port()
    proxy_cfg = proxy_cfg.model_copy(
        update={"port": port, "store": proxy_cfg.store.model_copy(update={"path": str(run_dir / "records.sqlite")})}
    )
    rollout_cfg = RolloutConfig(port=0, store={"path": str(run_dir / "rollout.sqlite")})
    with RolloutThread(rollout_cfg) as rollout:
        proxy = Proxy(proxy_cfg)
        node_cfg = NodeConfig(
            node_id="node-0",
            rollout_url=rollout.url,
            public_url=f"http://127.0.0.1:{port}",
            root=str(run_dir / "node"),
            capacity=cfg.node.capacity,
            heartbeat_s=2.0,
        )
        with NodeThread(GatewayNode(node_cfg, proxy), "127.0.0.1", port):
            results = asyncio.run(_submit_and_wait(rollout.url, specs, len(specs) * cfg.num_samples, console))
        proxy.store.close()
    with open(run_dir / "results.jsonl", "w") as out:
        out.writelines(json.dumps(s) + "\n" for s in results)
    return _summarize(results)


async def _submit_and_wait(url: str, specs: list[TaskSpec], total: int, console: Console) -> list[dict]:
    async with RolloutAPI(url) as api:
        for spec in specs:
            await api.submit(spec)
        with Steps(console, "sessions", total, transient=True) as progress:
            while True:
                tasks = await asyncio.gather(*(api.task(s.task_id or "") for s in specs))
                sessions = [s for t in tasks for s in t["sessions"]]
                done = sum(s["result"] is not None for s in sessions)
                states = Counter(s["state"] for s in sessions)
                progress.update(done, ", ".join(f"{state} {n}" for state, n in sorted(states.items())))
                if done == total:
                    return sessions
                await asyncio.sleep(0.5)


def _summarize(sessions: list[dict]) -> dict:
    results = [s["result"] for s in sessions]
    stats = [r.get("stats") or {} for r in results]
    rewards = [r["reward"] for r in results if r.get("reward") is not None and not r.get("masked")]
    timing = {
        k: round(fmean(r["timing"][k] for r in results), 2) for k in ("init_s", "ready_wait_s", "run_s", "postrun_s")
    }
    calls = [(kept(r) or {}).get("calls", 0) for r in results]
    return {
        "sessions": len(results),
        "by_status": dict(Counter(s["state"] for s in sessions)),
        "masked": sum(bool(r.get("masked")) for r in results),
        "budget_spent": sum(bool(s.get("budget_spent")) for s in stats),
        "mean_reward": round(fmean(rewards), 3) if rewards else None,
        "calls": sum(s.get("trainable", 0) for s in stats),
        "calls_per_session": {"min": min(calls), "mean": round(fmean(calls), 1), "max": max(calls)} if calls else None,
        "traces": sum(s.get("traces", 0) for s in stats),
        "trace_tokens": sum(s.get("trace_tokens", 0) for s in stats),
        "mean_stage_s": timing,
    }


def _table(summary: dict) -> Table:
    table = Table(title="polar up", show_header=False)
    for key, value in summary.items():
        table.add_row(key.replace("_", " "), json.dumps(value) if isinstance(value, dict) else str(value))
    return table
