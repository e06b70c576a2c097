"""`polar up` wiring: a dataset through the rollout server and a gateway node to results on disk
(the fake upstream stands in for vLLM here; the real one is exercised by tests/integration)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from nemo_polar.cli.up import UpConfig, tasks, up
from nemo_polar.config import load
from nemo_polar.contracts import HarnessSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_up_runs_every_row_per_harness_and_keeps_the_results(fake_upstream, tmp_path):
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text(json.dumps({"instruction": "Say hi.", "fields": {"id": "hi"}}) + "\n")
    cfg = load(
        UpConfig,
        "up",
        [
            f"dataset={dataset}",
            f"run_dir={tmp_path / 'runs'}",
            "harnesses=[{name: pi}]",
            "num_samples=2",
            "evaluator=session_completed",
            "vllm.start=false",
            f"proxy.upstream.url={fake_upstream.url}",
        ],
    )
    summary = up(cfg)
    assert summary["sessions"] == 2 and summary["by_status"] == {"completed": 2} and summary["mean_reward"] == 1.0
    (run,) = (tmp_path / "runs").iterdir()
    results = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert len(results) == 2 and all(r["result"]["traces_path"] for r in results)
    assert (run / "rollout.sqlite").exists() and (run / "records.sqlite").exists()


def rows(tmp_path: Path) -> Path:
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text(json.dumps({"instruction": "Say hi.", "fields": {"id": "hi"}}) + "\n")
    return dataset


def test_each_harness_keeps_its_own_step_limit_unless_max_steps_sets_every_ones(tmp_path):
    """up.yaml once set max_steps: 3 on every harness, and codex, which does not stop itself, was held to 3 calls."""
    base = [f"dataset={rows(tmp_path)}", f"run_dir={tmp_path}"]
    (codex,) = tasks(load(UpConfig, "up", [*base, "harness=codex"]))
    assert (codex.harness.max_steps, codex.call_budget) == (100, 100)  # conf/harness/codex.yaml's
    listed = tasks(load(UpConfig, "up", base))  # up.yaml's `harnesses`, which name no limit: HarnessSpec's
    assert {t.harness.name: t.harness.max_steps for t in listed} == dict.fromkeys(
        ("pi", "codex", "claude_code", "mini_swe_agent"), HarnessSpec.model_fields["max_steps"].default
    )
    (capped,) = tasks(load(UpConfig, "up", [*base, "harness=codex", "max_steps=7"]))
    assert (capped.harness.max_steps, capped.call_budget) == (7, 7)


@pytest.mark.vllm
def test_sessions_their_budget_ended_are_counted_and_named_in_the_summary(vllm, tmp_path):
    """The compacting agent makes two calls; with a budget of one, its second is refused and every session ends
    budget_spent: the summary counts them, gives the calls per session, and says what to raise."""
    cfg = load(
        UpConfig,
        "up",
        [
            f"dataset={rows(tmp_path)}",
            f"run_dir={tmp_path / 'runs'}",
            "harness=shell",
            f"harness.command='python3 {EXAMPLES}/compacting_agent.py'",
            f"runtime.volumes=[{EXAMPLES}:{EXAMPLES}]",
            "budget.calls=1",
            "num_samples=2",
            "evaluator=session_completed",
            "vllm.start=false",
            f"proxy.upstream.url={vllm.url}",
        ],
    )
    out = io.StringIO()
    summary = up(cfg, Console(file=out, width=200))
    assert (summary["sessions"], summary["budget_spent"], summary["masked"]) == (2, 2, 2), summary
    assert summary["calls_per_session"] == {"min": 1, "mean": 1.0, "max": 1}, summary
    text = out.getvalue()
    assert re.search(r"budget spent\W+2\W", text), text  # the table's row
    assert "2 of 2 sessions ended budget_spent (at 1 call): their agent was stopped there" in text, text
