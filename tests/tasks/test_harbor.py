"""Harbor task folders as a dataset: the bundled ones, Harbor's legacy forms, both download layouts, the
runtime mapping, `polar up dataset=harbor`, and our reading of task.toml judged by Harbor's own code."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from nemo_polar.errors import ConfigError
from nemo_polar.paths import DEPS
from nemo_polar.tasks.harbor import BUNDLED, Dockerfile, bundled, load_dataset, load_task, strip_canary

HARBOR_PY = DEPS / "harbor" / "bin" / "python"  # scripts/setup.sh harbor: harbor 0.26.0 on Python 3.12


def test_the_bundled_tasks_read_with_their_limits_and_legacy_forms():
    tasks = {t.name: t for t in bundled()}
    assert sorted(tasks) == ["csv-total", "polar-bundled/count-errors", "polar-bundled/fix-median"]
    count, legacy, median = tasks["polar-bundled/count-errors"], tasks["csv-total"], tasks["polar-bundled/fix-median"]
    assert count.instruction.startswith("`server.log`") and "canary" not in count.instruction
    assert count.workdir == "/app" and count.config.environment.network_mode == "no-network"
    assert legacy.config.schema_version == "1.0" and legacy.config.environment.memory_mb == 1024  # memory = "1G"
    assert legacy.config.environment.network_mode == "no-network"  # allow_internet = false
    assert "canary" not in legacy.instruction and legacy.task_id == "csv-total"
    assert median.config.verifier.env == {"PYTHONDONTWRITEBYTECODE": "1"} and median.config.agent.timeout_sec == 300
    for task in tasks.values():
        for need in ("environment/Dockerfile", "solution/solve.sh", "solution/wrong.sh", "tests/test.sh"):
            assert (Path(task.path) / need).is_file()


def test_canary_lines_go_only_at_the_top():
    text = "<!-- BENCHMARK DATA canary GUID 1 -->\n# another canary line\n\nDo it.\n# canary kept here\n"
    assert strip_canary(text) == "Do it.\n# canary kept here\n"
    assert strip_canary("# Title\nDo it.") == "# Title\nDo it."


def test_a_dockerfile_says_its_workdir_and_what_it_copies_there(tmp_path):
    (tmp_path / "Dockerfile").write_text(
        "FROM python:3.12 AS build\nWORKDIR /srv\nWORKDIR app\n"
        "COPY --from=build /x /y\nCOPY --chown=1:1 src/ ./\nADD https://e.com/f /f\n"
        "RUN pip install \\\n  pytest\nCOPY a.txt b.txt data/\n"
    )
    seen = Dockerfile.read(tmp_path / "Dockerfile")
    assert seen.workdir == "/srv/app"
    assert seen.copies == [(["src/"], "/srv/app/"), (["a.txt", "b.txt"], "/srv/app/data/")]


def test_the_working_copy_is_what_the_dockerfile_copies_into_the_workdir(tmp_path):
    tasks = {t.task_id: t for t in bundled()}
    copy = tasks["csv-total"].working_copy(tmp_path / "csv")
    assert sorted(p.name for p in copy.iterdir()) == ["orders.csv"]
    copy = tasks["polar-bundled__fix-median"].working_copy(tmp_path / "median")
    assert (copy / "stats" / "center.py").is_file() and not (copy / "Dockerfile").exists()


def test_the_runtime_block_is_completed_from_the_task(tmp_path):
    task = load_task(_task(tmp_path / "t", '[environment]\ndocker_image = "org/img:1"\ncpus = 2\nmemory_mb = 2048\n'))
    assert task.runtime({"kind": "docker"}) == {
        "kind": "docker", "workdir": "/app", "image": "org/img:1", "cpus": 2.0, "memory": "2048m"
    }  # fmt: skip
    assert task.runtime({"kind": "apptainer", "image": "/sif/mine.sif"})["image"] == "/sif/mine.sif"  # yours win
    image = task.runtime({"kind": "image", "image": "/rootfs"}, repo=tmp_path)
    assert image == {"kind": "image", "image": "/rootfs", "workdir": "/app", "repo": str(tmp_path)}  # no limits
    assert task.runtime(None, repo=tmp_path) == {"repo": str(tmp_path), "workdir": "/app"}  # local binds it there
    spec = task.task_spec({"name": "shell", "command": "true"}, runtime={"kind": "docker"})
    assert spec.task_id == "t" and spec.evaluator.kind == "harbor" and spec.fields["harbor"]["path"] == task.path
    assert spec.runtime.options["cpus"] == 2.0 and spec.agent_timeout_s == 1200  # no [agent].timeout_sec: ours


def _task(folder: Path, toml: str = "", name: str | None = None) -> Path:
    (folder / "tests").mkdir(parents=True)
    (folder / "environment").mkdir()
    (folder / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (folder / "instruction.md").write_text("Do the thing.\n")
    (folder / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    head = f'[task]\nname = "{name}"\n' if name else ""
    (folder / "task.toml").write_text(head + toml)
    return folder


def test_both_download_layouts_read_the_same(tmp_path):
    export = tmp_path / "export" / "my-dataset"  # harbor dataset download: <out>/<dataset>/<task>/
    for name in ("b-task", "a-task"):
        _task(export / name)
    assert [t.name for t in load_dataset(tmp_path / "export")] == ["a-task", "b-task"]
    cache = tmp_path / "cache"  # --cache: <org>/<name>/<digest>/
    _task(cache / "org" / "one" / "d1g3st", name="org/one")
    _task(cache / "org" / "two" / "f00d", name="org/two")
    assert [t.task_id for t in load_dataset(cache)] == ["org__one", "org__two"]
    _task(cache / "org" / "one" / "0ld", name="org/one")
    with pytest.raises(ConfigError, match="'org/one' is also"):
        load_dataset(cache)
    assert [t.name for t in load_dataset(export / "a-task")] == ["a-task"]  # one task folder is a dataset too


@pytest.mark.parametrize(
    "toml, match",
    [
        ('[verifier]\nenvironment_mode = "separate"\n', "separate environment"),
        ("[verifier.environment]\ncpus = 1\n", "separate environment"),
        ('[[steps]]\nname = "one"\n', "multi-step"),
        ("[verifier]\ntimeout_sec = -1\n", "verifier.timeout_sec"),
        ("[environment\n", "not TOML"),
    ],
)
def test_what_is_not_supported_or_wrong_is_refused(tmp_path, toml, match):
    with pytest.raises(ConfigError, match=match):
        load_task(_task(tmp_path / "t", toml))


def test_polar_up_takes_a_harbor_dataset(tmp_path):
    from nemo_polar.cli.up import UpConfig, tasks
    from nemo_polar.config import load

    up = load(UpConfig, "up", ["dataset=harbor", "evaluator=harbor", "harness=qwen_code", f"run_dir={tmp_path}"])
    specs = {s.task_id: s for s in tasks(up, tmp_path)}
    assert sorted(specs) == [
        "csv-total-qwen_code",
        "polar-bundled__count-errors-qwen_code",
        "polar-bundled__fix-median-qwen_code",
    ]
    count = specs["polar-bundled__count-errors-qwen_code"]
    assert count.agent_timeout_s == 300 and count.session_timeout_s >= 300 + 60 and count.evaluator.kind == "harbor"
    assert (Path(count.runtime.repo) / "server.log").is_file()
    # docs/rewards.md's command line: in docker, each task's own environment/Dockerfile is its image
    docker = load(UpConfig, "up", ["dataset=harbor", "evaluator=harbor", "runtime=docker", "harness=codex"])
    for spec in tasks(docker, tmp_path / "d"):
        task = spec.task_id.removesuffix("-codex").removeprefix("polar-bundled__")
        assert (
            spec.runtime.options["build"] == str(BUNDLED / task / "environment")
            and "image" not in spec.runtime.options
        )
    folder = load(UpConfig, "up", [f"dataset={BUNDLED}", "evaluator=harbor"])  # a folder: read as Harbor tasks
    assert len(tasks(folder, tmp_path)) == 3 * len(folder.harnesses)
    with pytest.raises(ConfigError, match="evaluator=harbor"):
        tasks(load(UpConfig, "up", ["dataset=harbor"]), tmp_path)  # polar up's default evaluator is `tests`


# --- judged by Harbor's own code (harbor 0.26.0 in its own Python 3.12 venv) ---------------------------------

HARBOR_READS = """
import json, sys, warnings
from pathlib import Path
warnings.simplefilter("ignore")
from harbor.lint.models import DEFAULT_RULES
from harbor.lint.task import lint_task
from harbor.models.task.task import Task
out = {}
for path in sys.argv[1:]:
    t = Task(Path(path))
    c = t.config
    out[path] = {
        "name": t.name, "instruction": t.instruction, "agent_timeout": c.agent.timeout_sec,
        "verifier_timeout": c.verifier.timeout_sec, "verifier_env": c.verifier.env,
        "docker_image": c.environment.docker_image, "workdir": c.environment.workdir, "cpus": c.environment.cpus,
        "memory_mb": c.environment.memory_mb, "gpus": c.environment.gpus,
        "network_mode": c.environment.network_mode.value,
        "lint": sorted({str(f.rule) for f in lint_task(Path(path), selected_rules=DEFAULT_RULES)}),
    }
print(json.dumps(out))
"""


def ours(task) -> dict:
    c = task.config
    return {
        "name": task.name, "instruction": task.instruction, "agent_timeout": c.agent.timeout_sec,
        "verifier_timeout": c.verifier.timeout_sec, "verifier_env": c.verifier.env,
        "docker_image": c.environment.docker_image, "workdir": c.environment.workdir, "cpus": c.environment.cpus,
        "memory_mb": c.environment.memory_mb, "gpus": c.environment.gpus, "network_mode": c.environment.network_mode,
    }  # fmt: skip


def test_harbor_reads_every_task_as_we_do(tmp_path):
    if not HARBOR_PY.exists():
        pytest.fail(f"no harbor environment at {HARBOR_PY.parent.parent}: run scripts/setup.sh harbor")
    variants = {
        "legacy": 'version = "1.0"\n[environment]\nmemory = "2G"\nallow_internet = true\ndocker_image = "x/y:1"\n',
        "full": '[task]\nname = "org/full"\n[agent]\ntimeout_sec = 90\n[verifier]\ntimeout_sec = 30\n'
        '[verifier.env]\nK = "v"\n[environment]\ncpus = 0.5\nmemory_mb = 300\ngpus = 1\nworkdir = "/w"\n'
        'network_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\nbuild_timeout_sec = 10\n[metadata]\nx = 1\n',
    }
    folders = [Path(t.path) for t in bundled()]
    for name, toml in variants.items():
        folders.append(_task(tmp_path / name, toml))
        (folders[-1] / "instruction.md").write_text("<!-- canary GUID x -->\n\nDo it.\n")
    done = subprocess.run([str(HARBOR_PY), "-c", HARBOR_READS, *map(str, folders)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout)
    for folder in folders:
        judged = theirs[str(folder)]
        assert judged.pop("lint") in ([], ["shared-verifier"]), folder  # we run the verifier in the agent's sandbox
        assert ours(load_task(folder)) == judged, folder
    assert theirs[str(tmp_path / "legacy")]["memory_mb"] == 2048 and theirs[str(tmp_path / "full")]["cpus"] == 0.5


def test_a_copied_task_keeps_reading_the_same(tmp_path):
    shutil.copytree(BUNDLED, tmp_path / "ds")
    assert [ours(t) for t in load_dataset(tmp_path / "ds")] == [ours(t) for t in bundled()]


def test_under_docker_a_task_runs_its_own_built_image():
    """A kind that builds gets the task's environment/ as its build context and no working copy (the image holds
    what the Dockerfile copies and installs at the workdir); its image, when the task names one, wins."""
    task = next(t for t in bundled() if t.name.endswith("fix-median"))
    spec = task.runtime({"kind": "docker"}, repo=Path("/elsewhere"))
    assert spec["build"] == str(Path(task.path) / "environment") and "repo" not in spec
    assert spec["workdir"] == "/app" and spec["cpus"] == 1 and spec["memory"] == "1024m"
    assert "build" not in task.runtime({"kind": "docker", "image": "mine:1"})
    assert "build" not in task.runtime({"kind": "image", "image": "/rootfs"}, repo=Path("/r"))
