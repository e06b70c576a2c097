"""The agent's patch: read from its working copy, applied to an evaluation copy of the task repo.

Every step is a git command in a `Sandbox` (boxes.py): the agent's own runtime or a fresh one of its
image, or a folder on this machine. The diff is staged through a throw-away index in the box's HOME, so
the agent's own index and commits do not change what its patch is; on this machine it is also taken
against the pristine repo's history through a throw-away object folder (the pristine objects are only
read, through git's alternates), so a reset or a deleted `.git` changes nothing either, and no
evaluator writes into the task repo. Harness state that lands in the working copy is not part of the
patch. Files go to git through the box's HOME; git runs with no user or system config, every
repository trusted.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePath

from ..errors import GitError, SandboxError
from ..runtimes.history import copy_repo
from ..sandbox import TIMEOUT_RC
from .base import EvalContext, Sandbox
from .boxes import FILES, HostBox, hand_in
from .row import EvalRow

# Folders and files harnesses, interpreters and test runners leave behind; never part of a patch.
JUNK = (
    ".codex/",
    ".claude/",
    ".qwen/",
    ".gemini/",
    ".pi/",
    ".aider.tags.cache.v4/",  # aider's repository-map cache: it writes it into the working copy, nowhere else
    "__pycache__/",
    "*.pyc",
    ".venv/",
    "venv/",
    ".pytest_cache/",
    "node_modules/",
)
GIT_TIMEOUT_S = 120.0
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0"}
# what a repository's own config could make git run, off (the box is a sandbox too)
GIT_CONFIG = ("-c", "safe.directory=*", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")
CANNOT_RUN_RC = (TIMEOUT_RC, 126, 127)  # git itself timed out, or could not be executed


async def git(
    box: Sandbox, args: list[str], env: dict[str, str] | None = None, check: bool = True
) -> tuple[int, str, str]:
    """git in `box`'s working copy; GitError when it cannot start, or with `check` when it fails."""
    try:
        rc, out, err = await box.exec(["git", *GIT_CONFIG, *args], GIT_ENV | (env or {}), GIT_TIMEOUT_S)
    except OSError as exc:
        raise GitError(f"git could not start: {exc}") from exc
    if check and rc != 0:
        why = "timed out" if rc == TIMEOUT_RC else (err or out).strip()[-2000:]
        raise GitError(f"git {' '.join(args[:3])} failed (rc {rc}): {why}")
    return rc, out, err


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


async def read_patch(ctx: EvalContext, row: EvalRow, exclude: list[str] | tuple[str, ...] = ()) -> str:
    """The agent's patch: the one its harness submitted, else its working copy's changes, read where it is —
    in an image, in the agent's own runtime against the image's repository; on this machine, against the
    pristine task repo's history (else the working copy's own), the harness's HOME (`ctx.home`) left out."""
    if ctx.patch is not None:
        return ctx.patch
    if ctx.sandbox is not None:
        box, history = ctx.sandbox, None
    else:  # git reads the working copy's .gitattributes (and, with no task repo, its config): sandboxed
        history = (row.task_repo(ctx.repo) or Path(ctx.work)) / ".git"
        box = HostBox(ctx.work, ctx.home or ctx.scratch, sandbox=True, readable=[history.resolve()])
    return (await extract_patch(box, row.base_commit, exclude, history)).patch


async def extract_patch(
    box: Sandbox,
    base_commit: str | None = None,
    exclude: list[str] | tuple[str, ...] = (),
    history: Path | None = None,
) -> Extracted:
    """The changes in `box`'s working copy against `base_commit` (default HEAD), new files included, junk
    and the box's HOME left out. `history`: a .git folder on this machine to read them against instead of
    the working copy's own (`box` is then a `HostBox`); its objects are only read."""
    (box.home / FILES).mkdir(parents=True, exist_ok=True)
    files = box.inside_home / FILES
    env = {"GIT_INDEX_FILE": str(files / "patch-index")}
    if history is not None:
        if not history.is_dir():
            raise GitError(f"{history.parent} is not a git repository (no .git folder)")
        if not box.inside_work.is_dir():
            raise GitError(f"the working copy {box.inside_work} is missing")
        (box.home / FILES / "patch-objects").mkdir(exist_ok=True)
        env |= {
            "GIT_DIR": str(history),
            "GIT_WORK_TREE": str(box.inside_work),
            "GIT_OBJECT_DIRECTORY": str(files / "patch-objects"),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": str((history / "objects").resolve()),
        }
    leave_out = list(exclude)
    if PurePath(box.inside_home).is_relative_to(box.inside_work):
        leave_out.append(str(PurePath(box.inside_home).relative_to(box.inside_work)) + "/")
    base = base_commit or "HEAD"
    rc, _, _ = await git(box, ["rev-parse", "--verify", "--quiet", f"{base}^{{commit}}"], env, check=False)
    if rc != 0:
        raise GitError(f"base_commit {base!r} is not in {history or box.inside_work} (rc {rc})")
    await git(box, ["read-tree", base], env)
    await git(box, ["add", "-A", "--", ".", *exclude_pathspecs(leave_out)], env)
    _, diff, _ = await git(box, ["diff", "--cached", "--binary", "--no-color", "--no-ext-diff", base], env)
    _, names, _ = await git(box, ["diff", "--cached", "--name-only", "-z", "--no-renames", base], env)
    return Extracted(diff, [n for n in names.split("\0") if n])


async def fresh_copy(repo: Path, box: HostBox, base_commit: str | None = None) -> None:
    """`box`'s working copy made a copy of the pristine repo, its history cut at `base_commit` as the agent's
    was (runtimes/history.py: the code under test runs here), checked out clean at it."""
    if not (Path(repo) / ".git").is_dir():
        raise GitError(f"the task repo {repo} is missing or not a git repository")
    if box.work.exists():
        shutil.rmtree(box.work)
    try:
        await asyncio.to_thread(copy_repo, Path(repo), box.work, base_commit)
    except SandboxError as exc:
        raise GitError(str(exc)) from exc
    await git(box, ["reset", "-q", "--hard"])
    await git(box, ["clean", "-q", "-fdx"])


async def patch_paths(box: Sandbox, patch: str) -> list[str]:
    """The paths a patch writes to, as git reads them (renames: both sides)."""
    if not patch.strip():
        return []
    rc, out, err = await git(box, ["apply", "--numstat", "-z", str(hand_in(box, "paths.diff", patch))], check=False)
    if rc != 0:
        raise GitError(f"unreadable patch: {err.strip()[-500:]}")
    paths: list[str] = []
    fields = out.split("\0")
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


def _literal(path: str) -> str:
    """`path` as a pattern of git's wildmatch that matches itself alone."""
    return "".join("\\" + ch if ch in "*?[\\" else ch for ch in path)


async def apply_patch(
    box: Sandbox, patch: str, name: str, exclude: list[str] | tuple[str, ...] = ()
) -> tuple[bool, str]:
    """`git apply` (whitespace tolerant) in `box`'s working copy; False and git's message when it does not
    apply, GitError when git could not run."""
    if not patch.strip():
        return True, ""
    path = hand_in(box, name, patch)
    args = ["apply", "--whitespace=nowarn", "--recount", *(f"--exclude={_literal(p)}" for p in exclude), str(path)]
    rc, out, err = await git(box, args, check=False)
    if rc == 0:
        return True, ""
    said = (err or out).strip()
    if rc in CANNOT_RUN_RC or ("not found" in said and "git" in said):
        raise GitError(f"git apply could not run (rc {rc}): {said[-500:]}")
    return False, said[-2000:]
