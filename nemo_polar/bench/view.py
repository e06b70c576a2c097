"""`polar bench view`: how fast the page shows a big run, in a real headless browser.

A run folder is written as `polar up` leaves one (a rollout store with tasks, sessions and their
results; a record store with every call), with `calls` calls: sessions of `per_session` calls (agent
turns whose prompts grow by the last answer and a tool result, one in four with a sub-agent of its
own), and one long session whose single chain is a trace of `trace_tokens` tokens. Its token ids are
the tiny model's, so the page shows text. Then `polar view` serves it and Debian's chromium, headless,
opens the page afresh each time (the median of `repeats`):

    list_first_render_ms    navigation start -> the session list painted (`_cold_ms`: the first view)
    list_rollups_ms         navigation start -> every session's rollup shown (computed from the
                            records on first view: results written before rollups do not carry them)
    session_render_ms       navigation start -> the long session painted (calls, chain tree, traces)
    trace_first_render_ms   navigation start -> the long trace's first tokens painted; the first view
                            (`_cold_ms`) builds the session's traces from its records, later ones reuse them
    trace_complete_ms       navigation start -> all its tokens in the page
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ..contracts import HarnessSpec, SessionResult, TaskSpec, Timing
from ..paths import TINY_MODEL
from ..records import CompletionRecord, Session, UpstreamInfo
from ..states import SessionState
from ..store import SqliteStore
from ..traces import build

EOT = 2  # the tiny model's <|im_end|>
VOCAB = 4096
UPSTREAM = UpstreamInfo(engine="vllm", url="http://127.0.0.1:8801/v1", model="tiny")
GROUP = 8  # sessions per task: a GRPO group
LONG_CALLS = 40


class _Writer:
    """Sessions into both stores, as a gateway node and its proxy would have written them."""

    def __init__(self, folder: Path, seed: int):
        from ..server.rollout.store import RolloutStore

        self.rng = random.Random(seed)
        self.rollout = RolloutStore(folder / "rollout.sqlite")
        self.records = SqliteStore(folder / "records.sqlite")
        self.clock = 1_790_000_000.0
        self.calls = 0

    def ids(self, n: int) -> list[int]:
        return [self.rng.randrange(3, VOCAB) for _ in range(n)]

    def chain(self, psid: str, first: int, calls: int, answer: int, tool: int, seq: int = 0) -> list[CompletionRecord]:
        """`calls` agent turns: each prompt is the last prompt, its answer and a tool result."""
        out, prompt = [], self.ids(first)
        for k in range(calls):
            sample = [*self.ids(answer - 1), EOT]
            latency = self.rng.uniform(0.4, 3.0)
            out.append(
                CompletionRecord(
                    id=f"{psid}-{seq + k}",
                    session_id=psid,
                    seq=seq + k,
                    started_at=self.clock,
                    finished_at=self.clock + latency,
                    first_token_at=self.clock + latency / 5,
                    dialect="openai_chat",
                    stream=True,
                    native_request={"model": "polar", "messages": [{"role": "user", "content": f"turn {k}"}]},
                    prompt_token_ids=prompt,
                    completion_token_ids=sample,
                    completion_logprobs=[-self.rng.expovariate(2.0) for _ in sample],
                    finish_reason="stop",
                    message={"role": "assistant", "content": f"answer {k}"},
                    usage={"prompt_tokens": len(prompt), "completion_tokens": len(sample)},
                    upstream=UPSTREAM,
                )
            )
            self.clock += latency + self.rng.uniform(0.1, 2.0)  # the tool's turn
            prompt = prompt + sample + self.ids(tool)
        self.calls += calls
        return out

    def session(self, task_id: str, session_id: str, index: int, records: list[CompletionRecord]) -> None:
        psid = records[0].session_id
        at = records[0].started_at
        opened = Session(id=psid, api_key=f"sk-{psid}", created_at=at, metadata={"task_id": task_id})
        self.records.add_session(opened)
        for r in records:
            self.records.add_record(r)
        built = build(records)
        run_s = records[-1].finished_at - records[0].started_at + 1.0
        result = SessionResult(
            session_id=session_id,
            task_id=task_id,
            status=SessionState.COMPLETED,
            reward=float(self.rng.random() < 0.3),
            proxy_session_id=psid,
            stats=built.stats.model_dump(),
            timing=Timing(queued_s=0.01, init_s=0.3, ready_wait_s=0.05 * index, run_s=run_s, postrun_s=0.4),
            node_id="node-0",
        )
        self.rollout.record_result(result)

    def task(self, task_id: str, sessions: int) -> list[str]:
        spec = TaskSpec(
            task_id=task_id,
            instruction=f"Fix the failing tests of {task_id}.",
            harness=HarnessSpec(name="shell", command="python3 agent.py"),
            num_samples=sessions,
        )
        _, rows = self.rollout.submit(spec)
        return [r.id for r in rows]

    def close(self) -> None:
        self.records.close()
        self.rollout.close()


def write_run(folder: Path, calls: int = 10_000, per_session: int = 10, trace_tokens: int = 100_000, seed: int = 0):
    """The run folder; returns (the long session's id, sessions written)."""
    w = _Writer(folder, seed)
    try:
        long_id = w.task("long", 1)[0]
        first, answer = trace_tokens // 50, trace_tokens // 200  # 40 turns: 2% prompt, 20% sampled
        tool = (trace_tokens - first - LONG_CALLS * answer) // (LONG_CALLS - 1)
        w.session("long", long_id, 0, w.chain("p-long", first, LONG_CALLS, answer, tool))
        sessions, t = 1, 0
        while w.calls < calls:
            left = calls - w.calls
            ids = w.task(f"task-{t:04d}", min(GROUP, -(-left // per_session)))
            for i, sid in enumerate(ids):
                n = min(per_session, calls - w.calls)
                sub = 3 if i % 4 == 0 and n > 4 else 0  # a sub-agent: a chain of its own, after the main one
                records = w.chain(f"p-{t}-{i}", 400, n - sub, 120, 200)
                if sub:
                    records += w.chain(f"p-{t}-{i}", 300, sub, 80, 150, seq=n - sub)
                w.session(f"task-{t:04d}", sid, i, records)
                sessions += 1
            t += 1
        w.records.flush()
        return long_id, sessions
    finally:
        w.close()


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 1)


def measure(folder: Path, long_id: str, repeats: int = 3) -> dict[str, Any]:
    from ..view.app import ViewThread
    from ..view.browser import Console, headless, mark_ms
    from ..view.sources import open_source

    out: dict[str, list[float]] = {k: [] for k in ("list", "rollups", "session", "trace", "trace_all")}
    errors: list[tuple[str, str]] = []
    with ViewThread(open_source(run_dir=str(folder)), tokenizer=str(TINY_MODEL)) as view, headless() as browser:
        for _ in range(repeats):
            for key, path, mark in (
                ("list", "/#/", "list-rendered"),
                ("trace", f"/#/s/{long_id}/t/0", "trace-rendered"),
                ("session", f"/#/s/{long_id}", "session-rendered"),
            ):
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                console = Console(page)
                page.goto(view.url + path)
                out[key].append(mark_ms(page, mark))
                if key == "list":
                    filled = "document.querySelector('#summary').dataset.pending === '0'"
                    page.wait_for_function(filled, timeout=300_000)
                    out["rollups"].append(page.evaluate("performance.now()"))
                if key == "trace":
                    out["trace_all"].append(mark_ms(page, "trace-complete"))
                errors += console.errors
                page.close()
        version = browser.version
    return {
        "list_first_render_ms": _median(out["list"]),
        "list_first_render_cold_ms": round(out["list"][0], 1),
        "list_rollups_ms": round(out["rollups"][0], 1),  # the first view computes them; later ones reuse
        "session_render_ms": _median(out["session"]),
        "trace_first_render_ms": _median(out["trace"]),
        "trace_first_render_cold_ms": round(out["trace"][0], 1),  # the first view builds the session's traces
        "trace_complete_ms": _median(out["trace_all"]),
        "runs_ms": {k: [round(v, 1) for v in vs] for k, vs in out.items()},
        "console_errors": errors,
        "browser": f"chromium {version}",
    }


def run(
    calls: int = 10_000, trace_tokens: int = 100_000, per_session: int = 10, repeats: int = 3, keep: str | None = None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="polar-bench-view-") as tmp:
        folder = Path(keep) if keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        long_id, sessions = write_run(folder, calls, per_session, trace_tokens)
        written_s = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in folder.glob("*.sqlite*"))
        timings = measure(folder, long_id, repeats)
    return {
        "calls": calls,
        "sessions": sessions,
        "trace_tokens": trace_tokens,
        "store_mb": round(size / 2**20, 1),
        "written_s": round(written_s, 1),
        **timings,
    }
