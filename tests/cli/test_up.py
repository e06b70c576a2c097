"""`polar up` wiring: a dataset through the rollout server and a gateway node to results on disk
(the fake upstream stands in for vLLM here; the real one is exercised by tests/integration)."""

from __future__ import annotations

import json

from nemo_polar.cli.up import UpConfig, up
from nemo_polar.config import load


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
