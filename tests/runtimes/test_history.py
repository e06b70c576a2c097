"""A working copy carries nothing of its task's future: cut by runtimes/history.py, from a repository whose
fix is reachable through every channel a leaky clone has (tests/redteam/history_repo.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from nemo_polar.errors import SandboxError
from nemo_polar.runtimes.history import SCRIPT, copy_repo, future
from nemo_polar.tasks.bundled import TASKS

from ..redteam.history_repo import build

ROMAN = next(t for t in TASKS if t.name == "roman")


def _git(work: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=work, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def leaky(tmp_path_factory) -> tuple[Path, dict]:
    dest = tmp_path_factory.mktemp("leaky") / "roman"
    return dest, build(ROMAN, dest)


def _assert_cut(work: Path, base: str) -> None:
    assert future(work, base) == []
    assert _git(work, "rev-parse", "HEAD") == base  # the commit keeps its hash
    assert _git(work, "for-each-ref", "--format=%(refname)") == "refs/heads/task"  # the branch it was on
    assert _git(work, "log", "--all", "--format=%H") == base
    assert _git(work, "status", "--porcelain") == ""
    assert not (work / ".git" / "ORIG_HEAD").exists() and not (work / ".git" / "FETCH_HEAD").exists()
    objects = _git(work, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split()
    assert sorted(objects) == sorted(
        line.split()[0] for line in _git(work, "rev-list", "--objects", base).splitlines()
    )
    fixed_line = ROMAN.patch.splitlines()[-1][1:]  # a line only the fix has
    argv = ["git", "cat-file", "--batch-all-objects", "--batch", "--unordered"]
    stored = subprocess.run(argv, cwd=work, capture_output=True, check=True).stdout
    assert fixed_line.strip() and fixed_line.encode() not in stored


def test_a_leaky_clone_says_what_it_carries(leaky):
    repo, row = leaky
    found = " ".join(future(repo, row["base_commit"]))
    stored = subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo, capture_output=True
    ).stdout
    assert ROMAN.patch.splitlines()[-1][1:].encode() in stored  # the fix is there to be read
    assert "refs beyond" in found and "commits" in found and "ORIG_HEAD" in found and "objects" in found, found


def test_a_copy_of_it_is_cut_at_its_commit_and_still_a_working_repository(leaky, tmp_path):
    repo, row = leaky
    work = tmp_path / "work"
    copy_repo(repo, work, row["base_commit"])
    _assert_cut(work, row["base_commit"])
    (work / "numerals" / "roman.py").write_text("changed\n")
    _git(work, "-c", "user.name=a", "-c", "user.email=a@b", "stash")  # what agents do
    assert _git(work, "status", "--porcelain") == "" and _git(work, "stash", "list")
    _git(work, "stash", "pop")
    assert _git(work, "diff", "--name-only") == "numerals/roman.py"


def test_in_place_as_inside_an_image(leaky, tmp_path):
    repo, row = leaky
    work = tmp_path / "testbed"
    shutil.copytree(repo, work, symlinks=True)  # the image's own repository, future and all
    subprocess.run(["sh", str(SCRIPT), row["base_commit"]], cwd=work, check=True)
    _assert_cut(work, row["base_commit"])


def test_a_folder_that_is_no_repository_is_copied_as_it_is_and_a_bad_commit_stops_it(leaky, tmp_path):
    plain = tmp_path / "plain"
    (plain / "a").mkdir(parents=True)
    (plain / "a" / "b.txt").write_text("x")
    copy_repo(plain, tmp_path / "copy")
    assert (tmp_path / "copy" / "a" / "b.txt").read_text() == "x" and future(tmp_path / "copy") == []
    with pytest.raises(SandboxError, match="not a commit"):
        copy_repo(leaky[0], tmp_path / "bad", "0" * 40)
