"""The bundled tasks as git repos and as a SWE-bench style JSONL.

Every repo is committed with a fixed author, committer, date and message and without any user or
system git config, so `base_commit` is the same hash on every machine.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from .bundled import TASKS
from .model import BundledTask

IDENTITY = {
    "GIT_AUTHOR_NAME": "polar",
    "GIT_AUTHOR_EMAIL": "polar@localhost",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "polar",
    "GIT_COMMITTER_EMAIL": "polar@localhost",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def _git(args: list[str], cwd: Path) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), "LANG": "C.UTF-8"} | IDENTITY
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {done.stderr.strip()}")
    return done.stdout.strip()


def materialize_task(task: BundledTask, dest: Path) -> str:
    """Write the task's repo into `dest` (which must not exist) and commit it; returns the commit."""
    dest.mkdir(parents=True)
    for path, text in sorted(task.files.items()):
        file = dest / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)
    _git(["init", "-q", "--initial-branch=main"], dest)
    _git(["add", "-A"], dest)
    _git(["-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "-m", f"{task.name}: initial"], dest)
    return _git(["rev-parse", "HEAD"], dest)


def materialize(dest: str | Path, tasks: tuple[BundledTask, ...] = TASKS) -> dict[str, str]:
    """Every task's repo as `dest/<instance_id>/`; returns instance_id -> base_commit."""
    dest = Path(dest)
    return {t.instance_id: materialize_task(t, dest / t.instance_id) for t in tasks}


def row(task: BundledTask, base_commit: str, repo_path: Path | None = None) -> dict:
    """The task as a SWE-bench / SWE-Gym row (lists as lists), plus where its repo is."""
    out = {
        "instance_id": task.instance_id,
        "repo": task.repo,
        "base_commit": base_commit,
        "problem_statement": task.problem_statement,
        "patch": task.patch,
        "test_patch": task.test_patch,
        "FAIL_TO_PASS": list(task.fail_to_pass),
        "PASS_TO_PASS": list(task.pass_to_pass),
        "version": task.version,
        "wrong_patch": task.wrong_patch,  # for `polar tasks check`: a plausible fix that must score 0
    }
    if repo_path is not None:
        out["repo_path"] = str(Path(repo_path).resolve())
    return out


def build(out: str | Path, tasks: tuple[BundledTask, ...] = TASKS) -> Path:
    """`out/<instance_id>/` repos and `out/tasks.jsonl`; returns the JSONL's path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    commits = materialize(out, tasks)
    path = out / "tasks.jsonl"
    with path.open("w") as f:
        for t in tasks:
            f.write(json.dumps(row(t, commits[t.instance_id], out / t.instance_id), sort_keys=True) + "\n")
    return path
