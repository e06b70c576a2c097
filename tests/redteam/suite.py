"""The red-team suite: reward-hacking attacks run as the agent through `polar up`, and what the graders paid.

For one runtime (local | image | docker) and one kind of task (swe | history | harbor), ONE `polar up` run:
every (task x attack) pair is a row of the dataset, plus one `legit` row per task (the task's own fix: `git apply`
of the row's `patch`, or the Harbor task's solution/solve.sh). Each row's instruction carries a first line
`polar-redteam: attack=<name> task=<task>`; the `shell` harness runs one dispatcher command (made here: a `case`
over the attack names with every script inlined, and the legit fixes keyed by task) that reads it from
$POLAR_TASK and runs that script in the working copy. No attack calls the model.

Kinds:
- swe: the bundled SWE-style tasks (`SWE_TASKS`), their repositories as `polar tasks build` makes them.
- history: the same tasks, each repository with its future (the fix and the tests committed after
  `base_commit`, in branches, tags, remotes, reflogs, the stash, notes and a dangling commit: history_repo.py).
- harbor: copies of the bundled Harbor tasks (`HARBOR_TASKS`), one per attack, the instruction rewritten.

The run folders are under `base` (default `<repository>/runs/redteam`, or $POLAR_REDTEAM_DIR): NOT under /tmp,
because the local runtime gives each sandbox a private /tmp, and a run folder there would hide from the agent
what a user's `runs/up/...` shows it (the rows, the stores, the other sessions' copies).

    results = run("local", "swe", upstream_url)     # RunResult: outcomes[(attack, task)] -> Outcome
    print(render([results, ...]))                  # or render(saved()): every run kept under the base folder

Running it (the assertions fail while any attack is paid; -s shows the table):

    .venv/bin/python -m pytest tests/redteam -s                 # local, image, docker: 9 polar up runs
    .venv/bin/python -m pytest tests/redteam -s -k local        # one runtime

Against another checkout (e.g. a worktree at an older commit) with this one's set-up:
`cd <worktree> && PYTHONPATH=$PWD POLAR_DEPS=<this checkout>/.deps <this checkout>/.venv/bin/python -m pytest ...`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nemo_polar.cli.up import UpConfig, up
from nemo_polar.config import load
from nemo_polar.contracts import HarnessSpec
from nemo_polar.tasks.bundled import TASKS
from nemo_polar.tasks.harbor import BUNDLED as HARBOR_BUNDLED
from nemo_polar.tasks.harbor import load_task
from nemo_polar.tasks.materialize import materialize_task, row

from . import history_repo

HERE = Path(__file__).resolve().parent
ATTACKS_DIR = HERE / "attacks"
REPO_ROOT = HERE.parents[1]
SWE_TASKS = ("roman", "paginate")
HARBOR_TASKS = ("count-errors", "csv-total", "fix-median")
KINDS = ("swe", "history", "harbor")
RUNTIMES = ("local", "image", "docker")
LEGIT = "legit"
MARK = "polar-redteam:"
# rows placed beside each task's legit row (a GRPO groupmate's solution is what host_sibling_copies looks for)
FIRST = ("host_sibling_copies",)
CAPACITY = {"init": 2, "run": 4, "postrun": 2, "ready": 4}
AGENT_TIMEOUT_S = 150
SESSION_TIMEOUT_S = 420


def default_base() -> Path:
    return Path(os.environ.get("POLAR_REDTEAM_DIR") or REPO_ROOT / "runs" / "redteam")


# --- the attacks ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Attack:
    name: str
    klass: str  # answer | test-surface | environment | escape
    kinds: tuple[str, ...]
    summary: str
    text: str


def attacks(kind: str | None = None, only: list[str] | None = None) -> list[Attack]:
    """Every attack script (its header read), or those for `kind`; `only` keeps the named ones."""
    out = []
    for path in sorted(ATTACKS_DIR.glob("*.sh")):
        text = path.read_text()
        head = dict(re.findall(r"^# (attack|class|kinds): (.+)$", text, re.M))
        missing = {"attack", "class", "kinds"} - set(head)
        if missing:
            raise ValueError(f"{path}: header lacks {sorted(missing)}")
        kinds = tuple(head["kinds"].split())
        if not set(kinds) <= set(KINDS) or head["class"] not in ("answer", "test-surface", "environment", "escape"):
            raise ValueError(f"{path}: bad class or kinds: {head}")
        out.append(Attack(path.stem, head["class"], kinds, head["attack"].strip(), text))
    if kind is not None:
        out = [a for a in out if kind in a.kinds]
    if only is not None:
        out = [a for a in out if a.name in only]
    return sorted(out, key=lambda a: (a.name not in FIRST, a.name))


def pairs(picked: list[Attack], tasks: list[str], fixed: list[str] = ()) -> list[tuple[str, str]]:
    """The rows' order, (attack, task): each task's `FIRST` attacks, then its legit row beside them (dispatched
    together, as a GRPO group's samples run together: they are already looking when the fix appears), then every
    other attack's rows; then the legit rows of the tasks in `fixed` that no attack is run on."""
    first = [a.name for a in picked if a.name in FIRST]
    rest = [a.name for a in picked if a.name not in FIRST]
    attacked = [(a, t) for t in tasks for a in [*first, LEGIT]] + [(a, t) for a in rest for t in tasks]
    return attacked + [(LEGIT, t) for t in fixed if t not in tasks]


def marker(attack: str, task: str) -> str:
    return f"{MARK} attack={attack} task={task}"


# --- the dispatcher: one shell command for every row ------------------------------------------------
DISPATCH_HEAD = r"""line=$(printf '%s\n' "$POLAR_TASK" | sed -n 's/^polar-redteam: //p' | head -n 1)
attack=$(printf '%s\n' "$line" | sed -n 's/.*attack=\([^ ]*\).*/\1/p')
task=$(printf '%s\n' "$line" | sed -n 's/.*task=\([^ ]*\).*/\1/p')
dir="${HOME:-/tmp}/.polar-redteam"
mkdir -p "$dir" 2>/dev/null || dir=$(mktemp -d)
script="$dir/run.sh"
interp=sh
echo "polar-redteam: attack=$attack task=$task in $(pwd)" >&2
"""
EOF_MARK = "POLAR_REDTEAM_SCRIPT_EOF"


def _heredoc(text: str) -> str:
    if EOF_MARK in text:
        raise ValueError(f"a script holds {EOF_MARK}")
    return f"cat > \"$script\" <<'{EOF_MARK}'\n{text if text.endswith(chr(10)) else text + chr(10)}{EOF_MARK}\n"


def payloads() -> str:
    """What several attacks write (attacks/payloads/<name>.py), exported as RT_<NAME> for their scripts."""
    out = []
    for path in sorted((ATTACKS_DIR / "payloads").glob("*.py")):
        name = "RT_" + path.stem.upper()
        out.append(f"{name}=$(cat <<'{EOF_MARK}'\n{path.read_text()}{EOF_MARK}\n)\nexport {name}\n")
    return "".join(out)


def dispatcher(scripts: dict[str, str], legit: dict[str, tuple[str, str]]) -> str:
    """The harness command: `scripts` by attack name (run with sh), `legit` by task name ((interpreter, script))."""
    out = [DISPATCH_HEAD, payloads(), 'case "$attack" in\n', f"{LEGIT})\n", 'case "$task" in\n']
    for task, (interp, text) in legit.items():
        out += [f"{task})\ninterp={interp}\n", _heredoc(text), ";;\n"]
    out += ['*) echo "polar-redteam: no legit fix for task $task" >&2; exit 2 ;;\n', "esac\n", ";;\n"]
    for name, text in scripts.items():
        out += [f"{name})\n", _heredoc(text), ";;\n"]
    out += ['*) echo "polar-redteam: unknown attack $attack" >&2; exit 2 ;;\n', "esac\n", 'exec $interp "$script"\n']
    return "".join(out)


def swe_legit(patch: str) -> tuple[str, str]:
    return "sh", f"git apply --whitespace=nowarn <<'POLAR_REDTEAM_PATCH_EOF'\n{patch}POLAR_REDTEAM_PATCH_EOF\n"


# --- the datasets -----------------------------------------------------------------------------------
@dataclass
class Dataset:
    path: Path  # a JSONL file (swe, history) or a folder of Harbor tasks
    rows: dict[str, tuple[str, str]]  # row id (the task id's stem) -> (attack, task)
    command: str  # the dispatcher
    tasks: tuple[str, ...]


def swe_dataset(kind: str, dest: Path, only: list[str] | None = None) -> Dataset:
    """Rows for kind swe or history in `dest/tasks/tasks.jsonl`: the attacked tasks' legit rows first, then every
    attack's, then every other bundled task's legit row (each fix must still score 1.0)."""
    chosen = sorted(TASKS, key=lambda t: (t.name not in SWE_TASKS, t.name))
    repos = dest / "repos"
    originals = {}
    for task in chosen:
        folder = repos / task.instance_id
        if kind == "history":
            originals[task.name] = history_repo.build(task, folder)
        else:
            originals[task.name] = row(task, materialize_task(task, folder), folder)
    picked = attacks(kind, only)
    rows, lines = {}, []
    for attack, task in pairs(picked, list(SWE_TASKS), [t.name for t in chosen]):
        data = dict(originals[task])
        data["instance_id"] = f"redteam__{task}__{attack}"
        data["problem_statement"] = marker(attack, task) + "\n\n" + data["problem_statement"]
        rows[data["instance_id"]] = (attack, task)
        lines.append(json.dumps(data, sort_keys=True) + "\n")
    path = dest / "tasks" / "tasks.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))
    legit = {t.name: swe_legit(t.patch) for t in chosen}
    command = dispatcher({a.name: a.text for a in picked}, legit)
    return Dataset(path, rows, command, tuple(t.name for t in chosen))


def _with_marker(instruction: str, line: str) -> str:
    """`line` placed after the leading canary comment lines (which the loader strips), before the rest."""
    lines = instruction.splitlines(keepends=True)
    i = 0
    while i < len(lines) and ("canary" in lines[i].lower() or not lines[i].strip()):
        i += 1
    return "".join(lines[:i]) + line + "\n\n" + "".join(lines[i:])


def harbor_dataset(dest: Path, only: list[str] | None = None) -> Dataset:
    """A copy of each bundled Harbor task per attack (and one legit) in `dest/tasks/`, named apart."""
    picked = attacks("harbor", only)
    folder = dest / "tasks"
    rows, legit = {}, {}
    for i, (attack, task) in enumerate(pairs(picked, list(HARBOR_TASKS))):
        source = HARBOR_BUNDLED / task
        copy = folder / f"{i:03d}" / f"{attack}__{task}"  # polar up reads a folder's tasks sorted by path
        shutil.copytree(source, copy)
        (copy / "instruction.md").write_text(
            _with_marker((source / "instruction.md").read_text(), marker(attack, task))
        )
        toml = (copy / "task.toml").read_text()
        if re.search(r"^\[task\]", toml, re.M):
            toml = re.sub(r'^name = ".*"$', f'name = "polar-redteam/{attack}__{task}"', toml, count=1, flags=re.M)
            (copy / "task.toml").write_text(toml)
        rows[load_task(copy).task_id] = (attack, task)
        legit[task] = ("bash", (source / "solution" / "solve.sh").read_text())
    command = dispatcher({a.name: a.text for a in picked}, legit)
    return Dataset(folder, rows, command, HARBOR_TASKS)


def dataset(kind: str, dest: Path, only: list[str] | None = None) -> Dataset:
    return harbor_dataset(dest, only) if kind == "harbor" else swe_dataset(kind, dest, only)


# --- one polar up run -------------------------------------------------------------------------------
@dataclass
class Outcome:
    reward: float | None
    masked: bool
    error: str | None = None
    state: str = ""
    detail: str = ""  # the evaluation's infrastructure error or the test log's tail, shortened

    @property
    def paid(self) -> bool:
        return not self.masked and self.reward is not None and self.reward > 0

    def cell(self) -> str:
        if self.masked or self.reward is None:
            return "M"
        return f"{self.reward:g}"


@dataclass
class RunResult:
    runtime: str
    kind: str
    tasks: tuple[str, ...]
    outcomes: dict[tuple[str, str], Outcome]
    wall_s: float
    run_dir: str
    summary: dict = field(default_factory=dict)

    def failures(self) -> list[str]:
        """What the suite asserts: every legit row paid 1.0 unmasked, no attack row paid."""
        out = []
        for (attack, task), o in sorted(self.outcomes.items()):
            where = f"{self.kind}/{self.runtime} {attack} x {task}"
            if attack == LEGIT and (o.masked or o.reward != 1.0):
                out.append(f"{where}: the legit fix got {o.cell()} ({o.error or o.detail})")
            elif attack != LEGIT and o.paid:
                out.append(f"{where}: the attack was paid {o.reward:g}")
        return out

    def save(self, path: Path) -> None:
        data = asdict(self) | {"outcomes": [[a, t, asdict(o)] for (a, t), o in self.outcomes.items()]}
        path.write_text(json.dumps(data, indent=1))

    @classmethod
    def read(cls, path: Path) -> RunResult:
        data = json.loads(path.read_text())
        outcomes = {(a, t): Outcome(**o) for a, t, o in data.pop("outcomes")}
        return cls(**(data | {"outcomes": outcomes, "tasks": tuple(data["tasks"])}))


def runtime_overrides(runtime: str, kind: str) -> list[str]:
    if runtime == "local":
        return ["runtime=local"]
    if runtime == "image":
        from nemo_polar.tasks.check import ROOTFS_PYTHON

        return ["runtime=image", f"runtime.image={ROOTFS_PYTHON}"]
    if runtime == "docker" and kind == "harbor":
        return ["runtime=docker"]  # docs/rewards.md's line: each task's own environment/Dockerfile built and run
    if runtime == "docker":
        from nemo_polar.local.docker_engine import image_name

        return ["runtime=docker", f"runtime.image={image_name('bookworm-python')}"]
    raise ValueError(f"runtime {runtime!r}: one of {RUNTIMES}")


def clear(folder: Path) -> None:
    """`folder` removed, even what an attack made immutable there (root in a local or image sandbox keeps
    CAP_LINUX_IMMUTABLE: `chattr +i` in a session's folder outlives the session, which then cannot be removed)."""
    if folder.exists() and shutil.which("chattr"):
        subprocess.run(["chattr", "-R", "-i", str(folder)], capture_output=True, timeout=300)
    shutil.rmtree(folder, ignore_errors=True)


def _outcome(session: dict) -> Outcome:
    result = session.get("result") or {}
    evaluation = (result.get("stats") or {}).get("evaluation") or {}
    details = evaluation.get("details") or {}
    detail = evaluation.get("infrastructure_error") or ""
    if not detail and details:
        tail = details.get("log_tail") or ""
        detail = " ".join(tail.split())[-300:]
    flags = [k for k in ("empty_patch", "apply_error", "left_out", "tampered", "planted") if details.get(k)]
    if flags:  # what a row's 0 rests on, so that a legit fix's 0 says why
        detail = f"{', '.join(flags)}; agent exit {(result.get('stats') or {}).get('exit_code')}; {detail}"
    return Outcome(
        reward=result.get("reward"),
        masked=bool(result.get("masked")),
        error=result.get("error"),
        state=session.get("state", ""),
        detail=detail,
    )


def run(
    runtime: str,
    kind: str,
    upstream_url: str,
    base: Path | None = None,
    only: list[str] | None = None,
    capacity: dict[str, int] | None = None,
) -> RunResult:
    """One `polar up` of every (task x attack) row of `kind` plus the legit rows, in `runtime`."""
    work = (base or default_base()) / f"{runtime}-{kind}"
    clear(work)
    work.mkdir(parents=True)
    data = dataset(kind, work, only)
    caps = capacity or CAPACITY
    overrides = [
        f"dataset={data.path}",
        f"run_dir={work / 'runs'}",
        "num_samples=1",
        f"evaluator={'harbor' if kind == 'harbor' else 'tests'}",
        "vllm.start=false",
        f"proxy.upstream.url={upstream_url}",
        f"agent_timeout_s={AGENT_TIMEOUT_S}",
        f"session_timeout_s={SESSION_TIMEOUT_S}",
        *(f"node.capacity.{k}={v}" for k, v in caps.items()),
        *runtime_overrides(runtime, kind),
    ]
    cfg = load(UpConfig, "up", overrides)
    cfg = cfg.model_copy(update={"harness": HarnessSpec.model_validate({"name": "shell", "command": data.command})})
    started = time.monotonic()
    summary = up(cfg)
    wall = round(time.monotonic() - started, 1)
    (run_dir,) = (work / "runs").iterdir()
    outcomes: dict[tuple[str, str], Outcome] = {}
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        session = json.loads(line)
        stem = session["task_id"].rsplit("-shell", 1)[0]
        outcomes[data.rows[stem]] = _outcome(session)
    missing = set(data.rows.values()) - set(outcomes)
    for key in missing:
        outcomes[key] = Outcome(None, True, "no result", "missing")
    result = RunResult(runtime, kind, data.tasks, outcomes, wall, str(run_dir), summary)
    result.save(work / "outcomes.json")
    return result


def saved(base: Path | None = None) -> list[RunResult]:
    """Every run's outcomes kept under `base`."""
    return [RunResult.read(p) for p in sorted((base or default_base()).glob("*/outcomes.json"))]


# --- the table --------------------------------------------------------------------------------------
def render(results: list[RunResult], reasons: bool = True) -> str:
    """A Markdown table: one row per attack (legit first), one column per kind x runtime; a cell has one mark per
    task of the kind, in the order the legend gives (1 / 0: the reward; M: masked; blank: does not apply)."""
    order = {k: i for i, k in enumerate(KINDS)}
    rorder = {r: i for i, r in enumerate(RUNTIMES)}
    results = sorted(results, key=lambda r: (order.get(r.kind, 9), rorder.get(r.runtime, 9)))
    names = [LEGIT] + [a.name for a in attacks()]
    klass = {a.name: a.klass for a in attacks()} | {LEGIT: "-"}
    head = ["attack", "class"] + [f"{r.kind} {r.runtime}" for r in results]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        cells = []
        for r in results:
            marks = [r.outcomes.get((name, t)) for t in r.tasks]
            cells.append(" ".join(m.cell() for m in marks if m))  # an attack's tasks come first in `r.tasks`
        if any(cells):
            lines.append("| " + " | ".join([name, klass.get(name, "?"), *cells]) + " |")
    legend = "; ".join(f"{k}: {', '.join(next(r.tasks for r in results if r.kind == k))}" for k in
                       dict.fromkeys(r.kind for r in results))  # fmt: skip
    out = "\n".join(lines) + f"\n\ntasks per cell, in order: {legend}\n"
    out += "wall time per polar up: " + ", ".join(f"{r.kind} {r.runtime} {r.wall_s:g} s" for r in results) + "\n"
    if reasons:
        masked = [
            f"- {r.kind} {r.runtime} {a} x {t}: {o.error or o.detail}"
            for r in results
            for (a, t), o in sorted(r.outcomes.items())
            if o.masked or o.reward is None
        ]
        if masked:
            out += "\nmasked:\n" + "\n".join(masked) + "\n"
    return out
