"""The agent's patch: read from its working copy, applied to a fresh copy of the task repo.

The diff is taken against the pristine repo's `base_commit` through a throw-away index and object
folder (the pristine repo's objects are only read, through git's alternates), so nothing the agent did
to its own `.git` — commits, resets, a deleted `.git` — changes what its patch is, and no evaluator
writes into the task repo. Harness state that lands in the working copy is not part of the patch.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import GitError
from .base import run

# Folders and files harnesses, interpreters and test runners leave behind; never part of a patch.
JUNK = (
    ".codex/",
    ".claude/",
    ".qwen/",
    ".gemini/",
    ".pi/",
    "__pycache__/",
    "*.pyc",
    ".venv/",
    "venv/",
    ".pytest_cache/",
    "node_modules/",
)
GIT_TIMEOUT_S = 120.0


def git_env(**extra: str) -> dict[str, str]:
    """No user or system config (hooks, signing, autocrlf, excludes) may change what git does here."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/nonexistent"),
        "LANG": "C.UTF-8",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
    }
    return env | extra


async def git(args: list[str], cwd: Path, env: dict[str, str] | None = None, stdin: str = "", check: bool = True):
    done = await run(["git", *args], cwd, env or git_env(), GIT_TIMEOUT_S, stdin.encode())
    if check and not done.ok:
        why = done.error or ("timed out" if done.timed_out else done.err.strip()[-2000:])
        raise GitError(f"git {' '.join(args[:3])} failed (rc {done.rc}): {why}")
    return done


def exclude_pathspecs(extra: tuple[str, ...] | list[str] = ()) -> list[str]:
    """`JUNK` and `extra` as git exclude pathspecs, matched at any depth."""
    specs = []
    for pattern in (*JUNK, *extra):
        pattern = pattern.strip("/") + ("/**" if pattern.endswith("/") else "")
        specs.append(f":(exclude,glob){pattern}" if pattern.startswith("**/") else f":(exclude,glob)**/{pattern}")
    return specs


@dataclass
class Extracted:
    patch: str
    files: list[str]  # the paths the patch touches


async def extract_patch(
    work: Path,
    scratch: Path,
    repo: Path | None = None,
    base_commit: str | None = None,
    exclude: list[str] | tuple[str, ...] = (),
    home: Path | None = None,
) -> Extracted:
    """The working copy's changes against `base_commit` (default: the repo's HEAD), new files included,
    junk and anything under `home` left out. The git history comes from `repo`, else from `work`."""
    source = Path(repo) if repo is not None else Path(work)
    git_dir = source / ".git"
    if not git_dir.is_dir():
        raise GitError(f"{source} is not a git repository (no .git folder)")
    if not Path(work).is_dir():
        raise GitError(f"the working copy {work} is missing")
    extra = list(exclude)
    if home is not None and Path(home).resolve().is_relative_to(Path(work).resolve()):
        extra.append(str(Path(home).resolve().relative_to(Path(work).resolve())) + "/")
    objects = scratch / "patch-objects"
    objects.mkdir(parents=True, exist_ok=True)
    env = git_env(
        GIT_DIR=str(git_dir),
        GIT_WORK_TREE=str(work),
        GIT_INDEX_FILE=str(scratch / "patch-index"),
        GIT_OBJECT_DIRECTORY=str(objects),
        GIT_ALTERNATE_OBJECT_DIRECTORIES=str((git_dir / "objects").resolve()),
    )
    base = base_commit or "HEAD"
    if not (await git(["rev-parse", "--verify", "--quiet", f"{base}^{{commit}}"], work, env, check=False)).ok:
        raise GitError(f"base_commit {base!r} is not in {source}")
    await git(["read-tree", base], work, env)
    await git(["add", "-A", "--", ".", *exclude_pathspecs(extra)], work, env)
    diff = await git(["diff", "--cached", "--binary", "--no-color", "--no-ext-diff", base], work, env)
    names = await git(["diff", "--cached", "--name-only", "-z", "--no-renames", base], work, env)
    return Extracted(diff.out, [n for n in names.out.split("\0") if n])


async def fresh_copy(repo: Path, dest: Path, base_commit: str | None = None) -> None:
    """A copy of the pristine repo, checked out clean at `base_commit`."""
    if not (Path(repo) / ".git").is_dir():
        raise GitError(f"the task repo {repo} is missing or not a git repository")
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(repo, dest, symlinks=True)
    if base_commit:
        await git(["checkout", "-q", "--force", "--detach", base_commit], dest)
    await git(["reset", "-q", "--hard"], dest)
    await git(["clean", "-q", "-fdx"], dest)


async def patch_paths(patch: str, cwd: Path) -> list[str]:
    """The paths a patch writes to, as git reads them (renames: both sides)."""
    done = await git(["apply", "--numstat", "-z", "-"], cwd, stdin=patch, check=False)
    if not done.ok:
        raise GitError(f"unreadable patch: {done.err.strip()[-500:]}")
    paths: list[str] = []
    fields = done.out.split("\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        if not entry:
            i += 1
            continue
        name = entry.split("\t", 2)[2] if entry.count("\t") >= 2 else ""
        if name:
            paths.append(name)
            i += 1
        else:  # a rename: the two names follow as their own fields
            paths.extend(fields[i + 1 : i + 3])
            i += 3
    return paths


async def apply_patch(patch: str, cwd: Path, exclude: list[str] | tuple[str, ...] = ()) -> tuple[bool, str]:
    """Apply with `git apply` (whitespace tolerant); False and git's message when it does not apply."""
    if not patch.strip():
        return True, ""
    args = ["apply", "--whitespace=nowarn", "--recount", *(f"--exclude={p}" for p in exclude), "-"]
    done = await git(args, cwd, stdin=patch, check=False)
    if done.ok:
        return True, ""
    if done.rc is None or done.timed_out:
        raise GitError(f"git apply could not run: {done.error or 'timed out'}")
    return False, done.err.strip()[-2000:]
