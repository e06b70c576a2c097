"""`polar runtime check` runs every registered harness: its configurations come from the registry and
the harness classes, not from a list a new harness could be missing from."""

from __future__ import annotations

import sys
import textwrap
from collections import Counter

import pytest

from nemo_polar.cli import runtime_check
from nemo_polar.cli.runtime_check import configurations
from nemo_polar.contracts import HarnessSpec
from nemo_polar.harnesses import HARNESSES, Harness
from nemo_polar.plugins import Registry

NEW = """
from typing import Literal

from nemo_polar.harnesses.base import Harness, HarnessSettings, Launch


class TalkerSettings(HarnessSettings):
    dialect: Literal["openai_chat", "anthropic"] = "openai_chat"


class Talker(Harness):
    name = "talker"
    dialects = ("openai_chat", "anthropic")
    Settings = TalkerSettings

    def launch(self, task, endpoint, inside, max_steps):
        return Launch(["true"], {})


class ScriptSettings(HarnessSettings):
    script: str


class Script(Harness):
    name = "script"
    dialects = ("openai_chat",)
    Settings = ScriptSettings
    check_options = {"script": "true"}

    def launch(self, task, endpoint, inside, max_steps):
        return Launch(["sh", "-c", self.settings.script], {})
"""


def test_every_registered_harness_is_checked_with_options_it_takes():
    configs = configurations()
    assert {options["name"] for options in configs.values()} == set(HARNESSES)
    for name, options in configs.items():  # a harness that needs an option names it in its check_options
        spec = HarnessSpec(**options, max_steps=2)
        assert HARNESSES.make(spec.name, spec.options).name == options["name"], name
    assert {"pi-openai_chat", "pi-openai_responses", "pi-anthropic", "pi-gemini", "shell", "codex"} <= set(configs)
    chooses = {name: "dialect" in cls.Settings.model_fields for name, cls in HARNESSES.items()}  # its wire API
    expected = {name: len(HARNESSES[name].dialects) if chooses[name] else 1 for name in HARNESSES}
    assert Counter(options["name"] for options in configs.values()) == expected


def test_a_new_harness_is_checked_once_per_api_its_settings_choose(tmp_path, monkeypatch):
    (tmp_path / "new_harnesses.py").write_text(textwrap.dedent(NEW))
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("new_harnesses")  # a room is read where it is imported
    monkeypatch.setattr(runtime_check, "HARNESSES", Registry("harness", Harness, "new_harnesses"))
    try:
        assert configurations() == {
            "talker-openai_chat": {"name": "talker", "dialect": "openai_chat"},
            "talker-anthropic": {"name": "talker", "dialect": "anthropic"},
            "script": {"name": "script", "script": "true"},
        }
    finally:
        sys.modules.pop("new_harnesses", None)


@pytest.mark.harness
def test_fidelity_rows_come_from_the_run(tmp_path):
    """`--fidelity` on the fake upstream (both passes): Pi streams Chat Completions and, having no step limit of
    its own, is ended by the session's budget in the tool loop (the refused call counted apart from those
    recorded); shell's one-call agent is one call, one chain, answered whole. The table lands between the
    markers of a page, the rest of it kept."""
    from nemo_polar.bench.fake_upstream import SERVED_MODEL, FakeUpstreamThread
    from nemo_polar.cli.fidelity import markdown, write_table
    from nemo_polar.harnesses.install import check_install

    check_install(HARNESSES["pi"]())
    with FakeUpstreamThread() as up:
        out = runtime_check.check(
            runtime_check.runtime_spec("local"),
            up.url,
            ["pi-openai_chat", "shell"],
            model=SERVED_MODEL,
            fidelity=True,
            timeout_s=120,
        )
    assert out["failures"] == [] and out["ran"] == 2, out
    pi, shell = out["fidelity"]
    assert (pi["configuration"], pi["dialect"], pi["streamed"]) == ("pi-openai_chat", "openai_chat", "yes")
    assert pi["stopped_by"] == "budget" and pi["tool_loop_calls"] == runtime_check.TOOL_LOOP_CALLS
    assert pi["calls_refused"] >= 1 and pi["calls_recorded"] + pi["calls_refused"] == pi["calls_made"]
    assert pi["tokens_trained"] == pi["tokens_sampled"] > 0 and pi["added_ms_mean"] > 0
    assert (shell["dialect"], shell["streamed"], shell["chains"]) == ("openai_chat", "no", 1)
    assert shell["calls_made"] == shell["calls_recorded"] == 2 and shell["side_calls"] == {}
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n<!-- fidelity -->\nold\n<!-- /fidelity -->\n\nafter\n")
    write_table(page, markdown(out["fidelity"], "local"), "made now")
    text = page.read_text()
    assert "old" not in text and text.startswith("# Title") and text.endswith("\nafter\n")
    assert "| `pi-openai_chat` |" in text and "| 6, budget |" in text
