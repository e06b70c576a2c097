"""`polar up`: the whole local stack on one machine, every model call recorded.

vLLM serves the tiny model (or any upstream you name), the proxy stands in front of it, and each
configured harness runs once on the task in its own HOME and working folder. The run folder keeps
the store, the records as JSONL and each harness's output.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import Field
from rich.console import Console
from rich.table import Table

from ..config import ProxyConfig, Strict
from ..local.vllm_server import VLLMServer
from ..proxy.serve import ProxyThread
from ..traces import build
from ..traces.export import write_jsonl
from .gateway.harnesses import HARNESSES, Endpoint, Harness
from .gateway.harnesses.pi import Pi
from .gateway.runner import run_launch


class VLLMConfig(Strict):
    start: bool = True
    port: int = 8801
    model: str = ".deps/models/tiny"
    timeout_s: float = 300


class UpConfig(Strict):
    run_dir: str = "runs/up"
    task: str
    harnesses: list[str] = Field(min_length=1)
    max_steps: int = Field(3, ge=1)
    harness_timeout_s: float = Field(300, gt=0)
    vllm: VLLMConfig = VLLMConfig()
    proxy: ProxyConfig = ProxyConfig()


def harness(spec: str) -> Harness:
    name, _, dialect = spec.partition(":")
    if name == "pi":
        return Pi(dialect or "openai_chat")
    if name not in HARNESSES or dialect:
        raise ValueError(f"unknown harness {spec!r}: choose from {sorted(HARNESSES)} (pi:<dialect> for pi)")
    return HARNESSES[name]()


def up(cfg: UpConfig, console: Console | None = None) -> list[dict]:
    console = console or Console(width=120)
    run_dir = Path(cfg.run_dir).resolve() / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    harnesses = [(spec, harness(spec)) for spec in cfg.harnesses]
    proxy_cfg = cfg.proxy.model_copy(
        update={"store": cfg.proxy.store.model_copy(update={"path": str(run_dir / "records.sqlite")})}
    )
    server = VLLMServer(model=Path(cfg.vllm.model), port=cfg.vllm.port, log_path=run_dir / "vllm.log")
    rows: list[dict] = []
    try:
        if cfg.vllm.start:
            with console.status(f"starting vLLM on {cfg.vllm.model} (about a minute on CPU)"):
                server.start(cfg.vllm.timeout_s)
            up_cfg = proxy_cfg.upstream.model_copy(update={"url": server.url, "model": server.served_name})
            proxy_cfg = proxy_cfg.model_copy(update={"upstream": up_cfg})
        with ProxyThread(proxy_cfg) as proxy:
            console.print(f"proxy on {proxy.url} -> {proxy_cfg.upstream.engine} {proxy_cfg.upstream.url}")
            for spec, h in harnesses:
                with console.status(f"running {spec}"):
                    rows.append(_run_one(proxy, spec, h, cfg, run_dir))
            proxy.proxy.store.flush()
            with open(run_dir / "records.jsonl", "w") as out:
                for record in proxy.proxy.store.records():
                    out.write(record.model_dump_json() + "\n")
    finally:
        server.stop()
    console.print(_table(rows))
    console.print(f"run folder: {run_dir}")
    return rows


def _run_one(proxy: ProxyThread, spec: str, h: Harness, cfg: UpConfig, run_dir: Path) -> dict:
    session = proxy.proxy.sessions.open(metadata={"harness": spec})
    folder = run_dir / spec.replace(":", "-")
    launch = h.launch(cfg.task, Endpoint(proxy.url, session.api_key), folder / "home", folder / "work", cfg.max_steps)
    t0 = time.monotonic()
    done = run_launch(launch, folder / "home", folder / "work", cfg.harness_timeout_s)
    (folder / "stdout.log").write_text(done.stdout)
    (folder / "stderr.log").write_text(done.stderr)
    proxy.proxy.store.flush()
    records = proxy.proxy.store.records(session.id)
    traces = build(records, "prefix_tree")
    write_jsonl(traces, folder / "traces.jsonl", session_id=session.id)
    return {
        "harness": spec,
        "exit": "timeout" if done.timed_out else done.returncode,
        "calls": len(records),
        "ok": sum(r.status == "ok" for r in records),
        "dialects": ",".join(sorted({r.dialect for r in records})),
        "prompt_tokens": sum(len(r.prompt_token_ids) for r in records),
        "completion_tokens": sum(len(r.completion_token_ids) for r in records),
        "traces": traces.stats.traces,
        "trace_tokens": traces.stats.trace_tokens,
        "seconds": round(time.monotonic() - t0, 1),
    }


COLUMNS = (
    "harness",
    "exit",
    "calls",
    "ok",
    "dialects",
    "prompt_tokens",
    "completion_tokens",
    "traces",
    "trace_tokens",
    "seconds",
)


def _table(rows: list[dict]) -> Table:
    table = Table(title="polar up")
    for col in COLUMNS:
        table.add_column(col.replace("_", " "), justify="left" if col in ("harness", "dialects") else "right")
    for r in rows:
        table.add_row(*(str(r[c]) for c in COLUMNS))
    return table
