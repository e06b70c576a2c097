"""A bundled task's repository with real future history: what a leaky SWE image looks like.

`build(task, dest)` writes the task's repository at `base_commit` (the same commit as the bundled row's:
same files, identity and date as `nemo_polar.tasks.materialize`), then, as a repository cloned after the
fix landed would have it, the gold fix and the hidden tests committed after it, reachable through every
channel a policy could read:

- branches `main` (the tests commit) and `fix/<name>` (the fix commit), an annotated tag `v0.2` and a
  lightweight tag `fixed`, `refs/remotes/origin/main`, all in packed-refs;
- the reflogs of HEAD and `main` (the commits, then the checkout back to `base_commit`);
- a stash entry whose work tree is the fix (`refs/stash`, its own reflog);
- ORIG_HEAD (the fix commit) and FETCH_HEAD (origin's main);
- a git note on `base_commit` holding the fix as a diff (`refs/notes/commits`);
- an unreachable (dangling) commit, tree and blob holding the fix with one more comment line.

The work tree is checked out at `base_commit` on branch `task`, clean. Every commit has a fixed identity
and date, so every object is the same on every machine.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nemo_polar.tasks.materialize import IDENTITY, materialize_task, row
from nemo_polar.tasks.model import BundledTask, apply_edits

FIX_DATE = "2026-01-02T00:00:00+00:00"
TESTS_DATE = "2026-01-03T00:00:00+00:00"
LATER_DATE = "2026-01-04T00:00:00+00:00"


def _git(args: list[str], cwd: Path, date: str = FIX_DATE, stdin: str | None = None) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), "LANG": "C.UTF-8"} | IDENTITY
    env |= {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    done = subprocess.run(
        ["git", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", *args],
        cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {done.stderr.strip()}")
    return done.stdout.strip()


def _write(dest: Path, files: dict[str, str], only: set[str] | None = None) -> None:
    for path, text in files.items():
        if only is not None and path not in only:
            continue
        file = dest / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)


def build(task: BundledTask, dest: str | Path) -> dict:
    """The task's repository with its future in `dest` (which must not exist), and its SWE row (`repo_path`
    this repository, `base_commit` the bundled one)."""
    dest = Path(dest)
    base = materialize_task(task, dest)  # branch main at base_commit
    fixed = apply_edits(task.files, task.fix)
    tested = apply_edits(fixed, task.hidden_tests)
    source = set(task.fix)

    _write(dest, fixed, source)
    _git(["add", "-A"], dest, FIX_DATE)
    _git(
        ["commit", "-q", "--no-verify", "-m", f"{task.name}: fix ({task.summary or 'the reported bug'})"],
        dest,
        FIX_DATE,
    )
    fix_commit = _git(["rev-parse", "HEAD"], dest)
    _write(dest, tested, set(task.hidden_tests))
    _git(["add", "-A"], dest, TESTS_DATE)
    _git(["commit", "-q", "--no-verify", "-m", f"{task.name}: tests for the fix"], dest, TESTS_DATE)
    tests_commit = _git(["rev-parse", "HEAD"], dest)

    _git(["branch", f"fix/{task.name}", fix_commit], dest, TESTS_DATE)
    _git(["tag", "-a", "v0.2", "-m", f"{task.name} 0.2", tests_commit], dest, TESTS_DATE)
    _git(["tag", "fixed", fix_commit], dest, TESTS_DATE)
    _git(["update-ref", "refs/remotes/origin/main", tests_commit], dest, TESTS_DATE)
    _git(["notes", "add", "-m", task.patch, base], dest, LATER_DATE)

    # back to base_commit on a branch of its own (HEAD's reflog keeps the way there)
    _git(["checkout", "-q", "-b", "task", base], dest, LATER_DATE)
    # a stash entry holding the fix
    _write(dest, fixed, source)
    _git(["stash", "push", "-q", "-m", f"WIP on task: {task.name} fix"], dest, LATER_DATE)

    # an unreachable commit: the fix with one more comment line (its blob and tree are unreachable too)
    dangling = {p: fixed[p] + "# fixed upstream\n" for p in source}
    _write(dest, dangling, source)
    _git(["add", "-A"], dest, LATER_DATE)
    tree = _git(["write-tree"], dest, LATER_DATE)
    _git(["commit-tree", tree, "-p", base, "-m", f"{task.name}: fix (rebased)"], dest, LATER_DATE)
    _git(["reset", "-q", "--hard", base], dest, LATER_DATE)  # the work tree and index back at base

    git_dir = dest / ".git"
    (git_dir / "ORIG_HEAD").write_text(fix_commit + "\n")
    (git_dir / "FETCH_HEAD").write_text(f"{tests_commit}\t\tbranch 'main' of https://github.com/{task.repo}\n")
    _git(["pack-refs", "--all"], dest, LATER_DATE)

    status = _git(["status", "--porcelain"], dest)
    if status or _git(["rev-parse", "HEAD"], dest) != base:
        raise RuntimeError(f"{dest}: not clean at base_commit after building its history: {status}")
    return row(task, base, dest)
