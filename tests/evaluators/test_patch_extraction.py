"""The agent's patch: real changes and new files in, harness junk and HOME out."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from nemo_polar.evaluators.boxes import HostBox
from nemo_polar.evaluators.patch import GitError, extract_patch


def _extract(work, tmp_path, repo=None, base_commit=None, home=None):
    """As an evaluator reads a session's patch on this machine: against the pristine repo's history."""
    box = HostBox(work, home or tmp_path / "scratch")
    return asyncio.run(extract_patch(box, base_commit, history=Path(repo or work) / ".git"))


def test_keeps_changes_and_new_files_and_drops_junk(task_copy, tmp_path):
    _, row, pristine, work = task_copy("paginate")
    (work / "pager" / "core.py").write_text((work / "pager" / "core.py").read_text().replace("//", "// 1 *"))
    (work / "pager" / "extra.py").write_text("NEW = 1\n")
    (work / "docs" / "notes.md").parent.mkdir()
    (work / "docs" / "notes.md").write_text("a note\n")
    junk = [
        ".codex/config.toml", ".claude/settings.json", ".qwen/x", ".gemini/y", ".pi/agent/models.json",
        "pager/__pycache__/core.cpython-311.pyc", "stray.pyc", ".venv/bin/python", "venv/lib/x.py",
        ".pytest_cache/v/cache", "node_modules/left-pad/index.js", "sub/dir/.claude/z",
    ]  # fmt: skip
    for path in junk:
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text("junk\n")
    home = work / "agent-home"
    (home / ".config").mkdir(parents=True)
    (home / ".config" / "token").write_text("secret\n")

    got = _extract(work, tmp_path, repo=pristine, base_commit=row["base_commit"], home=home)

    assert sorted(got.files) == ["docs/notes.md", "pager/core.py", "pager/extra.py"]
    assert "+NEW = 1" in got.patch and "// 1 *" in got.patch
    assert "junk" not in got.patch and "secret" not in got.patch


def test_agent_commits_and_a_deleted_git_folder_do_not_hide_the_patch(task_copy, tmp_path):
    _, row, pristine, work = task_copy("semver")
    (work / "versions" / "compare.py").write_text("changed\n")
    subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qam", "x"], cwd=work, check=True)
    committed = _extract(work, tmp_path, repo=pristine, base_commit=row["base_commit"])
    assert committed.files == ["versions/compare.py"]
    subprocess.run(["rm", "-rf", str(work / ".git")], check=True)
    gone = _extract(work, tmp_path / "again", repo=pristine, base_commit=row["base_commit"])
    assert gone.patch == committed.patch


def test_no_change_is_an_empty_patch_and_leaves_the_repos_alone(task_copy, tmp_path):
    _, row, pristine, work = task_copy("roman")
    before = subprocess.run(["git", "count-objects"], cwd=pristine, capture_output=True, text=True).stdout
    assert _extract(work, tmp_path, repo=pristine, base_commit=row["base_commit"]).patch == ""
    (work / "new.txt").write_text("x\n")
    assert _extract(work, tmp_path / "b", repo=pristine, base_commit=row["base_commit"]).files == ["new.txt"]
    after = subprocess.run(["git", "count-objects"], cwd=pristine, capture_output=True, text=True).stdout
    assert before == after  # new objects went to the scratch folder, not into the task repo


def test_unknown_base_commit_and_missing_repo_are_errors(task_copy, tmp_path):
    _, _, pristine, work = task_copy("roman")
    with pytest.raises(GitError, match="base_commit"):
        _extract(work, tmp_path, repo=pristine, base_commit="0" * 40)
    with pytest.raises(GitError, match="not a git repository"):
        _extract(work, tmp_path, repo=tmp_path / "nowhere")


def test_a_working_copys_git_config_runs_nothing_on_this_machine(task_copy, tmp_path):
    """With no task repo the patch is read against the working copy's own .git: its config's filters and
    fsmonitor are the agent's to write. What they run stays in the sandbox, and the host sees none of it."""
    from nemo_polar.evaluators import EvalContext
    from nemo_polar.evaluators.patch import read_patch
    from nemo_polar.evaluators.row import EvalRow

    _, row, _, work = task_copy("roman")
    planted = tmp_path / "outside" / "ran"
    planted.parent.mkdir()
    hook = f"\"sh -c 'echo ran > {planted}; cat'\""  # quoted: a bare ; starts a comment in git's config
    with (work / ".git" / "config").open("a") as config:
        config.write(f'[filter "x"]\n\tclean = {hook}\n[core]\n\tfsmonitor = {hook}\n')
    (work / ".gitattributes").write_text("* filter=x\n")
    (work / "numerals" / "roman.py").write_text("changed\n")
    ctx = EvalContext(fields=row, config={}, work=work, scratch=tmp_path / "scratch")
    patch = asyncio.run(read_patch(ctx, EvalRow.parse(row | {"repo_path": None})))
    assert "+changed" in patch and not planted.exists()
