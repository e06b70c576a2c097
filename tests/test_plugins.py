"""One plug-in pattern: harnesses, runtimes, builders and evaluators by name or by `package.module:Class`,
names checked and each plug-in's own settings validated when a task is validated, not on a node."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from nemo_polar.contracts import HarnessSpec, TaskSpec
from nemo_polar.errors import UnknownPlugin
from nemo_polar.evaluators import EVALUATORS
from nemo_polar.harnesses import HARNESSES, Endpoint, Inside
from nemo_polar.plugins import STORED, Registry
from nemo_polar.runtimes import RUNTIMES
from nemo_polar.runtimes.spec import RuntimeSpec
from nemo_polar.traces import BUILDERS, build

from .harnesses.test_launch import KEY, URL

OWN = """
from pathlib import Path

from pydantic import Field

from nemo_polar.evaluators.base import Evaluation, Evaluator
from nemo_polar.harnesses.base import Harness, HarnessSettings, Launch
from nemo_polar.runtimes.local import LocalRuntime
from nemo_polar.traces.builders import PerRequest


class EchoSettings(HarnessSettings):
    words: int = Field(3, ge=1)


class Echo(Harness):
    name = "echo"
    dialects = ("openai_chat",)
    Settings = EchoSettings

    def launch(self, task, endpoint, inside, max_steps):
        words = task.split()[: self.settings.words]
        return Launch(["echo", *words], self.base_env(inside) | {"KEY": endpoint.api_key})


class Twice(Evaluator):
    name = "twice"

    async def evaluate(self, ctx):
        return Evaluation(reward=1.0)


class MySettings(LocalRuntime.Settings):
    flavour: str = Field("plain", pattern="^(plain|salted)$")


class MyRuntime(LocalRuntime):
    Settings = MySettings

    @classmethod
    def make(cls, settings, **context):
        made = super().make(settings, **context)
        made.flavour = settings.flavour
        return made


class MyImages(MyRuntime):
    in_image, pulls = True, True

    @classmethod
    def image_ref(cls, image):
        return "mine://" + image


class Reversed(PerRequest):
    name = "reversed"

    def traces(self, records, stats, events, **kw):
        return list(reversed(super().traces(records, stats, events, **kw)))


class NotAPlugin:
    pass
"""


@pytest.fixture
def own(tmp_path, monkeypatch):
    """A module of the user's own, outside the package, importable by path."""
    (tmp_path / "my_plugins.py").write_text(textwrap.dedent(OWN))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_plugins"
    sys.modules.pop("my_plugins", None)


def test_each_registry_lists_its_builtins():
    assert {"codex", "pi", "shell"} <= set(HARNESSES)  # all of them: harnesses/test_launch.py
    assert {"local", "docker", "apptainer", "image"} <= set(RUNTIMES)
    assert {"prefix_tree", "per_request"} <= set(BUILDERS)
    assert {"session_completed", "tests", "swebench"} <= set(EVALUATORS)
    assert HARNESSES["pi"].name == "pi" and BUILDERS["per_request"].name == "per_request"


@pytest.mark.parametrize(
    ("registry", "helpers"),
    [
        (HARNESSES, {"base", "install", "logs", "versions"}),
        (RUNTIMES, {"base", "dockerfile", "fresh", "history", "spec", "steps", "toolchain"}),
        (EVALUATORS, {"base", "boxes", "patch", "pytest_log", "row", "surface"}),
    ],
    ids=["harnesses", "runtimes", "evaluators"],
)
def test_a_plugins_module_is_its_registration(registry, helpers):
    """Every module of a room but its helpers holds exactly one built-in, found without importing it:
    a new plug-in is its module."""
    room = Path(sys.modules[registry.room].__file__).parent
    modules = {path.stem for path in room.glob("[!_]*.py")} - helpers
    where = [value.partition(":")[0].rpartition(".")[2] for value in registry.builtins.values()]
    assert sorted(where) == sorted(modules)


def test_two_plugins_of_one_name_are_refused(tmp_path, monkeypatch):
    (tmp_path / "twice.py").write_text("class A:\n    name = 'x'\n\n\nclass B:\n    name = 'x'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("twice")
    try:
        with pytest.raises(ValueError, match="'x' is both"):
            list(Registry("harness", HARNESSES.base, "twice"))
    finally:
        sys.modules.pop("twice", None)


@pytest.mark.parametrize("registry", [HARNESSES, RUNTIMES, BUILDERS, EVALUATORS])
def test_an_unknown_name_is_refused_with_the_known_ones(registry):
    with pytest.raises(UnknownPlugin) as exc:
        registry["nope"]
    assert "unknown" in str(exc.value) and all(name in str(exc.value) for name in registry)
    with pytest.raises(UnknownPlugin, match="cannot load"):
        registry["no_such_module_here:Thing"]


def test_a_class_of_your_own_by_import_path(own, tmp_path):
    echo = HARNESSES[f"{own}:Echo"]
    out = HARNESSES.make(f"{own}:Echo", {"words": 2}).launch(
        "one two three", Endpoint(URL, KEY), Inside(tmp_path, tmp_path), 1
    )
    assert echo.name == "echo" and out.argv == ["echo", "one", "two"] and out.env["KEY"] == KEY
    assert EVALUATORS[f"{own}:Twice"].name == "twice"
    spec = RuntimeSpec(kind=f"{own}:MyRuntime", sandbox=False)
    assert type(spec.make(tmp_path, "s1", URL)).__name__ == "MyRuntime"
    with pytest.raises(UnknownPlugin, match="is not a Harness"):
        HARNESSES[f"{own}:NotAPlugin"]


def test_a_builder_of_your_own_builds_the_traces(own, tmp_path):
    from tests.traces.test_builders import rec

    records = [rec("a", 0, [1, 2], [3], [-0.1]), rec("b", 1, [1, 2, 3, 4], [5], [-0.2])]
    ours, theirs = build(records, f"{own}:Reversed"), build(records, "per_request")
    assert [t.record_ids for t in ours.traces] == [t.record_ids for t in reversed(theirs.traces)]


def test_a_task_is_checked_when_it_is_validated(own):
    def problems(**spec) -> str:
        with pytest.raises(ValidationError) as exc:
            TaskSpec.model_validate({"instruction": "x", "harness": {"name": "pi"}} | spec)
        return str(exc.value)

    assert "unknown harness 'codx'" in problems(harness={"name": "codx"}) and "claude_code" in problems(
        harness={"name": "codx"}
    )
    assert "pi speaks" in problems(harness={"name": "pi", "dialect": "grpc"})
    assert "harness.effort" in problems(harness={"name": "pi", "effort": "high"})  # not one of pi's settings
    assert "needs `command`" in problems(harness={"name": "shell"})
    assert "harness.words" in problems(harness={"name": f"{own}:Echo", "words": 0})
    assert "unknown runtime 'podman'" in problems(runtime={"kind": "podman"})
    assert "unknown builder 'tree'" in problems(builder="tree")
    assert "unknown evaluator" in problems(evaluator={"kind": "test"})
    assert "timeout_z" in problems(evaluator={"kind": "tests", "config": {"timeout_z": 1}})
    assert TaskSpec(instruction="x", harness={"name": "pi", "dialect": None}).harness.options == {}  # null: default


def test_a_stored_spec_does_not_load_its_plugins_again():
    data = {"instruction": "x", "harness": {"name": "gone.module:Harness"}, "evaluator": {"kind": "gone:E"}}
    spec = TaskSpec.model_validate(data, context=STORED)  # checked when it was submitted
    assert spec.harness.name == "gone.module:Harness"
    with pytest.raises(ValidationError, match="cannot load"):
        TaskSpec.model_validate(data)


def test_the_env_setting_reaches_the_harness_under_its_own_variables(tmp_path):
    spec = HarnessSpec(name="codex", env={"HTTPS_PROXY": "http://corp:3128", "POLAR_API_KEY": "stolen"})
    out = HARNESSES.make(spec.name, spec.options).launch("t", Endpoint(URL, KEY), Inside(tmp_path, tmp_path), 1)
    assert out.env["HTTPS_PROXY"] == "http://corp:3128"
    assert out.env["POLAR_API_KEY"] == KEY  # the harness's own variables win


def test_a_node_builds_the_runtime_a_task_names(tmp_path):
    rt = RuntimeSpec(sandbox=False).make(tmp_path, "s1", URL)
    asyncio.run(rt.start())
    try:
        assert Path(rt.work).is_dir() and not rt.sandboxed
    finally:
        asyncio.run(rt.stop())


def test_a_runtime_of_your_own_gets_what_a_builtin_gets(own, tmp_path):
    """Its settings checked at submit by its own model, handed to it when a node makes it, and its image
    rules read by the dataset loader, exactly as for `docker`."""
    from nemo_polar.tasks.dataset import TaskRow

    with pytest.raises(ValidationError, match=r"runtime.flavour"):
        TaskSpec.model_validate(
            {"instruction": "x", "harness": {"name": "pi"}, "runtime": {"kind": f"{own}:MyRuntime", "flavour": "sour"}}
        )
    settings = r"its settings: limits, sandbox, workdir, volumes, flavour"
    with pytest.raises(ValidationError, match=r"not a setting of runtime .*" + settings):
        RuntimeSpec(kind=f"{own}:MyRuntime", cpus=2)
    spec = RuntimeSpec(kind=f"{own}:MyRuntime", flavour="salted", sandbox=False)
    assert spec.make(tmp_path, "s1", URL).flavour == "salted"
    row = TaskRow.parse(
        {
            "instance_id": "r1",
            "problem_statement": "fix",
            "repo": "o/r",
            "base_commit": "abc",
            "FAIL_TO_PASS": ["t"],
            "image": "repo/img:1",
        },
        "row",
    )
    assert row.runtime({"kind": f"{own}:MyImages"})["image"] == "mine://repo/img:1"
    assert "image" not in row.runtime({"kind": f"{own}:MyRuntime"})


def test_a_runtime_kind_refuses_the_settings_of_another():
    refused = r"cpus\n.*not a setting of runtime 'local' \(its settings: limits, sandbox, workdir, volumes\)"
    with pytest.raises(ValidationError, match=refused):
        RuntimeSpec(kind="local", cpus=2)
    with pytest.raises(ValidationError, match=r"image\n.*Field required"):
        RuntimeSpec(kind="apptainer")
    with pytest.raises(ValidationError, match=r"docker takes runtime.image or runtime.build"):
        RuntimeSpec(kind="docker")
