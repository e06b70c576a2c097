"""A harness from outside the package, named by its import path, through `polar up` on the tiny model:
the same rollout server, gateway node, sandbox, proxy and traces as a bundled one, with no line of
nemo_polar changed."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from nemo_polar.cli.up import UpConfig, up
from nemo_polar.config import load

pytestmark = pytest.mark.vllm

AGENT = Path(__file__).resolve().parents[2] / "examples" / "one_call_agent.py"

HARNESS = f'''
"""A team's own harness: one Chat Completions call, with a setting of its own."""

from pydantic import Field

from nemo_polar.harnesses.base import Harness, HarnessSettings, Launch


class OneCallSettings(HarnessSettings):
    python: str = Field("python3", description="the interpreter that runs the agent")


class OneCall(Harness):
    name = "one_call"
    dialects = ("openai_chat",)
    Settings = OneCallSettings

    def launch(self, task, endpoint, inside, max_steps):
        env = self.base_env(inside) | {{
            "OPENAI_BASE_URL": endpoint.base_url + "/v1",
            "OPENAI_API_KEY": endpoint.api_key,
            "POLAR_MODEL": endpoint.model,
            "POLAR_TASK": task,
        }}
        return Launch([self.settings.python, "{AGENT}"], env)
'''


def test_a_harness_of_your_own_runs_through_polar_up(vllm, tmp_path, monkeypatch):
    (tmp_path / "team_harness.py").write_text(textwrap.dedent(HARNESS))
    monkeypatch.syspath_prepend(str(tmp_path))
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text(json.dumps({"instruction": "Say hi.", "fields": {"id": "hi"}}) + "\n")
    cfg = load(
        UpConfig,
        "up",
        [
            f"dataset={dataset}",
            f"run_dir={tmp_path / 'runs'}",
            "harnesses=[{name: 'team_harness:OneCall', python: python3}]",
            "num_samples=2",
            f"runtime.volumes=[{AGENT.parent}:{AGENT.parent}]",  # the sandbox sees no host folder it is not given
            "evaluator=session_completed",
            "vllm.start=false",
            f"proxy.upstream.url={vllm.url}",
        ],
    )
    summary = up(cfg)
    assert summary["sessions"] == 2 and summary["by_status"] == {"completed": 2}, summary
    assert summary["mean_reward"] == 1.0 and summary["calls"] == 2 and summary["traces"] == 2
    (run,) = (tmp_path / "runs").iterdir()
    for line in (run / "results.jsonl").read_text().splitlines():
        result = json.loads(line)["result"]
        assert result["proxy_session_id"] and not result["stats"]["harness_version"]  # no pin: nothing to check
        assert result["stats"]["trained_tokens"] > 0


def test_a_typo_in_its_path_fails_before_anything_starts(tmp_path):
    from nemo_polar.errors import ConfigError

    with pytest.raises(ConfigError, match="cannot load harness 'team_harnes:OneCall'"):
        load(UpConfig, "up", ["harnesses=[{name: 'team_harnes:OneCall'}]", f"run_dir={tmp_path}"])
