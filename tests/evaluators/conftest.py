from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nemo_polar.tasks.bundled import TASKS
from nemo_polar.tasks.materialize import materialize, row

BY_NAME = {t.name: t for t in TASKS}


@pytest.fixture(scope="session")
def repos(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("repos")
    return root, materialize(root)


@pytest.fixture
def task_copy(repos, tmp_path):
    """(task, row, pristine repo, a working copy) for a bundled task by name."""
    root, commits = repos

    def make(name: str):
        task = BY_NAME[name]
        pristine = root / task.instance_id
        work = tmp_path / "work"
        shutil.copytree(pristine, work, symlinks=True)
        return task, row(task, commits[task.instance_id]), pristine, work

    return make
