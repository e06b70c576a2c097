"""`polar bench grading`: what the defences of the grader cost, side by side with the grader without them.

- history: a repository of N commits (fast-import, built here; the task's commit at 80% of them, the rest its
  future on the same branch, a tag at the tip), at N/4, N/2 and N: a session's working copy made as before (the
  whole folder copied, history and all) and as now (`runtimes.history.copy_repo`: the files copied, the history
  cut at the task's commit), and the cut of an image's own repository in place (`inside/cut_history.sh`, what a
  SWE image's session pays as it starts). Seconds per session (the median of `repeats`), and what the copy holds
  beyond the commit (`history.future`).
- evaluation: the `tests` evaluator on bundled tasks with their reference fix, as the gateway runs it (`prewarm`
  while the agent works, then `evaluate` in POST-RUN), with its defences (the test surface left out, the guard
  in pytest) and without them (`surface: false, guard: false`, the evaluation copy a plain copy of the repository),
  the arms taking turns; seconds of each, and the ratio.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from ..evaluators import EVALUATORS, EvalContext
from ..evaluators import patch as patch_module
from ..runtimes.history import SCRIPT, copy_repo, future
from ..tasks.bundled import TASKS
from ..tasks.materialize import IDENTITY, materialize_task, row

FILES = 500  # files the repository's commits change in turn


def build_repo(dest: Path, commits: int, files: int = FILES) -> str:
    """A repository of `commits` commits on `main` (each rewrites one of `files` files), checked out at the task's
    commit (80% of the way), the rest of `main` and a tag at its tip ahead of it; the task's commit."""
    dest.mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(dest)} | IDENTITY
    subprocess.run(["git", "init", "-q", "--initial-branch=main"], cwd=dest, env=env, check=True)
    stream = []
    for i in range(1, commits + 1):
        message = f"change {i}\n"
        body = f"# file {i % files}, version {i}\n" + "x = 1\n" * 20
        stream.append(
            f"commit refs/heads/main\nmark :{i}\ncommitter polar <polar@localhost> {1_700_000_000 + i} +0000\n"
            f"data {len(message)}\n{message}" + (f"from :{i - 1}\n" if i > 1 else "")
            + f"M 100644 inline src/f{i % files}.py\ndata {len(body)}\n{body}\n"
        )  # fmt: skip
    stream.append(f"reset refs/tags/v1\nfrom :{commits}\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=dest, env=env, input="".join(stream), text=True, check=True)
    base = subprocess.run(
        ["git", "rev-parse", f"main~{commits - int(commits * 0.8)}"], cwd=dest, env=env, capture_output=True,
        text=True, check=True,
    ).stdout.strip()  # fmt: skip
    subprocess.run(["git", "checkout", "-q", base], cwd=dest, env=env, check=True)
    return base


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times), 3)


def history(commits: int, repeats: int, root: Path) -> dict[str, Any]:
    """The working copy of a session on a repository of `commits` commits: before, now, and in place."""
    repo = root / f"repo-{commits}"
    t0 = time.perf_counter()
    base = build_repo(repo, commits)
    built_s = time.perf_counter() - t0
    out = root / "out"

    def plain() -> None:
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(repo, out, symlinks=True)

    def cut() -> None:
        shutil.rmtree(out, ignore_errors=True)
        copy_repo(repo, out, base)

    def in_place() -> None:  # the copy is the image's folder; only the script is timed
        plain()
        t0 = time.perf_counter()
        subprocess.run(["sh", str(SCRIPT), base], cwd=out, check=True, capture_output=True)
        timed.append(time.perf_counter() - t0)

    before_s, now_s = _median_s(plain, repeats), _median_s(cut, repeats)
    timed: list[float] = []
    for _ in range(repeats):
        in_place()
    left = future(out, base)
    cut()
    return {
        "commits": commits,
        "commits_kept": int(_git(out, "rev-list", "--count", "HEAD")),
        "built_s": round(built_s, 2),
        "before_s": before_s,
        "cut_s": now_s,
        "cut_over_before": round(now_s / before_s, 2),
        "in_place_s": round(statistics.median(timed), 3),
        "future_before": future(repo, base),
        "future_after": left + future(out, base),
    }


def _git(work: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=work, capture_output=True, text=True, check=True).stdout.strip()


@contextmanager
def _plain_evaluation_copy():
    """The baseline arm's evaluation copy: the whole repository copied, as before the history cut."""

    def copy(repo: Path, dest: Path, commit: str | None = None) -> None:
        shutil.copytree(repo, dest, symlinks=True)
        if commit:
            subprocess.run(["git", "checkout", "-q", "--force", "--detach", commit], cwd=dest, check=True)

    with mock.patch.object(patch_module, "copy_repo", copy):
        yield


ARMS = {"defended": {}, "baseline": {"surface": False, "guard": False}}


def evaluation(tasks: int, repeats: int, root: Path) -> dict[str, Any]:
    """The `tests` evaluator on `tasks` bundled tasks with their reference fix, per arm: prewarm and evaluate."""
    seconds: dict[str, dict[str, list[float]]] = {arm: {"prewarm": [], "evaluate": []} for arm in ARMS}
    rewards: dict[str, list[float | None]] = {arm: [] for arm in ARMS}
    picked = TASKS[:tasks]
    repos = {t.name: materialize_task(t, root / "tasks" / t.instance_id) for t in picked}
    for n in range(repeats):
        for task in picked:
            for arm in ARMS if n % 2 == 0 else reversed(list(ARMS)):  # the arms take turns going first
                work = root / "work"
                shutil.rmtree(work, ignore_errors=True)
                shutil.copytree(root / "tasks" / task.instance_id, work, symlinks=True)
                subprocess.run(["git", "apply", "-"], cwd=work, input=task.patch, text=True, check=True)
                fields = row(task, repos[task.name], root / "tasks" / task.instance_id)
                config = {"timeout_s": 300} | ARMS[arm]
                scratch = root / "scratch" / f"{arm}-{n}-{task.name}"
                ctx = EvalContext(fields=fields, config=config, work=work, scratch=scratch)
                evaluator = EVALUATORS.make("tests", config)
                with _plain_evaluation_copy() if arm == "baseline" else _nothing():
                    t0 = time.perf_counter()
                    asyncio.run(evaluator.prewarm(ctx))
                    t1 = time.perf_counter()
                    result = asyncio.run(evaluator.evaluate(ctx))
                    t2 = time.perf_counter()
                seconds[arm]["prewarm"].append(t1 - t0)
                seconds[arm]["evaluate"].append(t2 - t1)
                rewards[arm].append(result.reward)
                shutil.rmtree(scratch, ignore_errors=True)
    median = {arm: {k: round(statistics.median(v), 3) for k, v in s.items()} for arm, s in seconds.items()}
    return {
        "tasks": [t.name for t in picked],
        "runs_per_arm": repeats * len(picked),
        "seconds": median,
        "evaluate_over_baseline": round(median["defended"]["evaluate"] / median["baseline"]["evaluate"], 3),
        "prewarm_over_baseline": round(median["defended"]["prewarm"] / median["baseline"]["prewarm"], 3),
        "rewards": {arm: sorted(set(r)) for arm, r in rewards.items()},
    }


@contextmanager
def _nothing():
    yield


def run(commits: int = 10_000, repeats: int = 3, tasks: int = 3) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="polar-bench-grading-") as folder:
        root = Path(folder)
        sizes = sorted({max(commits // 4, 10), max(commits // 2, 10), commits})
        return {
            "history": [history(n, repeats, root / f"h{n}") for n in sizes],
            "evaluation": evaluation(tasks, repeats, root / "eval"),
        }
