"""The patch steps of `patch.py`, run inside a session's image: for tasks whose repository lives in the
image (SWE-bench's /testbed) and whose tests need the image's own environment.

The patch is the agent's working directory against `base_commit`, staged through a throw-away index in
HOME (the agent's own index and commits do not change it; new files are in it; junk is not). It is
applied in a fresh sandbox of the same image with `git apply`, files passed in through that sandbox's
HOME. The image needs git; everything runs with no user or system git config, every repository trusted.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import GitError
from .base import Sandbox
from .patch import GIT_TIMEOUT_S, Extracted, exclude_pathspecs

FILES = ".polar-eval"  # under a sandbox's HOME: the files we hand it
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0"}


async def git_inside(
    box: Sandbox, args: list[str], env: dict[str, str] | None = None, check: bool = True
) -> tuple[int, str, str]:
    rc, out, err = await box.exec(["git", "-c", "safe.directory=*", *args], GIT_ENV | (env or {}), GIT_TIMEOUT_S)
    if check and rc != 0:
        raise GitError(f"git {' '.join(args[:3])} failed in the image (rc {rc}): {(err or out).strip()[-2000:]}")
    return rc, out, err


async def extract_inside(
    box: Sandbox, base_commit: str | None, exclude: list[str] | tuple[str, ...] = ()
) -> Extracted:
    """The agent's changes in `box`'s working directory against `base_commit` (default HEAD)."""
    base = base_commit or "HEAD"
    env = {"GIT_INDEX_FILE": str(box.inside_home / FILES / "patch-index")}
    (box.home / FILES).mkdir(exist_ok=True)
    rc, _, err = await git_inside(box, ["rev-parse", "--verify", "--quiet", f"{base}^{{commit}}"], env, check=False)
    if rc != 0:
        raise GitError(f"base_commit {base!r} is not in the image's {box.inside_work} (rc {rc}): {err.strip()[-500:]}")
    await git_inside(box, ["read-tree", base], env)
    await git_inside(box, ["add", "-A", "--", ".", *exclude_pathspecs(exclude)], env)
    _, diff, _ = await git_inside(box, ["diff", "--cached", "--binary", "--no-color", "--no-ext-diff", base], env)
    _, names, _ = await git_inside(box, ["diff", "--cached", "--name-only", "-z", "--no-renames", base], env)
    return Extracted(diff, [n for n in names.split("\0") if n])


def hand_in(box: Sandbox, name: str, text: str) -> Path:
    """`text` as a file the sandbox can read; its path inside."""
    folder = box.home / FILES
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    return box.inside_home / FILES / name


async def apply_inside(
    box: Sandbox, patch: str, name: str, exclude: list[str] | tuple[str, ...] = ()
) -> tuple[bool, str]:
    """`git apply` in `box`'s working directory; False and git's message when it does not apply."""
    if not patch.strip():
        return True, ""
    path = hand_in(box, name, patch)
    args = ["apply", "--whitespace=nowarn", "--recount", *(f"--exclude={p}" for p in exclude), str(path)]
    rc, out, err = await git_inside(box, args, check=False)
    if rc == 0:
        return True, ""
    if rc in (124, 126, 127) or "not found" in err and "git" in err:
        raise GitError(f"git apply could not run in the image (rc {rc}): {(err or out).strip()[-500:]}")
    return False, (err or out).strip()[-2000:]
