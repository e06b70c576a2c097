"""A task's repository as a session gets it: cut at its commit, nothing of its future.

A clone carries what came after the task's commit (later commits, branches, tags, remotes, reflog, stash,
notes, unreachable objects), and the fix is among it: an agent that reads `git log --all` is paid for
copying it. Every working copy, the agent's and the evaluation's, in every runtime, is therefore made by
`inside/cut_history.sh`: a new repository of the objects the commit reaches, one ref at it, the commit's
hash kept (the past stays: `git log`, `git blame`, `git diff`, `git stash` work as in any clone).

- On this machine (`copy_repo`: the local runtime's working copy, a repository copied into an image, the
  evaluation copy) the files are copied without .git and the cut repository is read out of the task's.
- In an image whose repository is the image's own (SWE-bench's /testbed) the script runs inside the
  sandbox as the sandbox starts, before anything of the task or the agent (`ContainerRuntime.cut_history`).

`future` says what of the future a repository carries (`polar tasks check` warns).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ..errors import SandboxError
from . import toolchain

SCRIPT = toolchain.SCRIPTS / "cut_history.sh"
TIMEOUT_S = 600.0
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0"}


def _git_dir(repo: Path) -> Path | None:
    """The repository of the folder `repo` (its .git folder, or where a .git file points), else None."""
    if not (repo / ".git").exists():
        return None
    done = subprocess.run(
        ["git", "-c", "safe.directory=*", "rev-parse", "--absolute-git-dir"],
        cwd=repo, env=os.environ | GIT_ENV, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return Path(done.stdout.strip()) if done.returncode == 0 else None


def copy_repo(repo: Path, dest: Path, commit: str | None = None) -> None:
    """`repo`'s files copied to `dest` (which must not exist) with its repository cut at `commit` (default its
    HEAD); a folder that is no repository is copied as it is. SandboxError when the cut fails."""
    repo = Path(repo)
    shutil.copytree(repo, dest, symlinks=True, ignore=lambda folder, _: [".git"] if Path(folder) == repo else [])
    source = _git_dir(repo)
    if source is None:
        return
    argv = ["sh", str(SCRIPT), commit or "HEAD", str(source)]
    done = subprocess.run(argv, cwd=dest, env=os.environ | GIT_ENV, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise SandboxError(f"cutting {repo}'s history at {commit or 'HEAD'} failed: {done.stderr.strip()[-1000:]}")


def future(repo: Path, commit: str | None = None) -> list[str]:
    """What `repo` holds beyond `commit` (default HEAD): refs that are not it or its ancestors, commits it does
    not reach (branches, tags, reflog, stash), ORIG_HEAD and FETCH_HEAD, objects it does not reach. Empty
    for a repository cut at `commit`, and for a folder that is no repository."""
    source = _git_dir(Path(repo))
    if source is None:
        return []

    def git(*args: str) -> tuple[int, str]:
        argv = ["git", "-c", "safe.directory=*", f"--git-dir={source}", *args]
        done = subprocess.run(argv, env=os.environ | GIT_ENV, capture_output=True, text=True, timeout=TIMEOUT_S)
        return done.returncode, done.stdout

    rc, base = git("rev-parse", "--verify", "--quiet", f"{commit or 'HEAD'}^{{commit}}")
    base = base.strip()
    if rc != 0 or not base:
        return [f"{commit or 'HEAD'} is not a commit of {repo}"]
    found = []
    refs = [line.split(" ", 1) for line in git("for-each-ref", "--format=%(objectname) %(refname)")[1].splitlines()]
    beyond = sorted(name for sha, name in refs if git("merge-base", "--is-ancestor", sha, base)[0] != 0)
    if beyond:
        found.append(f"{len(beyond)} refs beyond {base[:12]} ({', '.join(beyond[:5])})")
    later = git("rev-list", "--count", "--all", "--reflog", f"^{base}")[1].strip()
    if later not in ("", "0"):
        found.append(f"{later} commits {base[:12]} does not reach (branches, tags, remotes, reflog, stash, notes)")
    found += [f"{special} is kept" for special in ("ORIG_HEAD", "FETCH_HEAD") if (source / special).exists()]
    reached = len(git("rev-list", "--objects", base)[1].splitlines())
    stored = len(git("cat-file", "--batch-all-objects", "--batch-check=%(objectname)")[1].splitlines())
    if stored > reached:
        found.append(f"{stored - reached} objects {base[:12]} does not reach")
    return found
