"""Harbor tasks as a dataset: task folders (Harbor 0.26's format) read into our task spec.

A Harbor task is a folder: `instruction.md` (leading canary comment lines stripped, as Harbor does),
`task.toml`, `environment/Dockerfile` (or `[environment].docker_image`), `solution/solve.sh` and
`tests/test.sh`, which writes the reward to /logs/verifier/reward.json or reward.txt. A dataset is a
folder holding task folders at any depth: Harbor's export layout (`harbor dataset download`:
<out>/<dataset>/<task>/) and its cache layout (<org>/<name>/<digest>/) both read the same.

`task.toml` is parsed here with tomllib (Harbor needs Python 3.12, so it is not a dependency); what we
read of it, with Harbor's defaults and its legacy forms (`version`, `memory = "1G"`, `allow_internet`):

- `[agent].timeout_sec` -> the task's `agent_timeout_s`;
- `[verifier]` `timeout_sec` (600) and `env` -> the `harbor` evaluator's run of tests/test.sh;
  `environment_mode = "separate"` (a verifier container of its own) is refused: only Harbor's default,
  the verifier in the agent's sandbox, is run;
- `[environment]` `docker_image` -> `image` for the kinds that pull images; `workdir` (else the
  Dockerfile's last WORKDIR, else /app) -> `workdir`; `cpus`, `memory_mb`, `gpus` -> the limits of the
  kinds that take them; `network_mode` is kept in the fields only: a sandbox reaches the proxy and
  nothing else, whatever the task asks.

Under `docker` the Dockerfile is built on the node's engine (`runtime.build`, once per content) and the session
runs in that image, with what its RUN steps install. Elsewhere it is not built: what it COPYs or ADDs from the
build context into the working directory becomes the session's working copy (`runtime.repo`), so the `local`
and `image` runtimes run such tasks as they are; a task that needs what its RUN steps install needs an image
that has it (`runtime.image`, or its `docker_image`).
"""

from __future__ import annotations

import posixpath
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..contracts import TaskSpec
from ..errors import ConfigError, problems
from ..runtimes import RUNTIMES
from ..runtimes.dockerfile import Dockerfile
from ..runtimes.spec import RuntimeSpec, given

DEFAULT_WORKDIR = "/app"  # Harbor's task template and most of its tasks
_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)  # Harbor's own pattern


class _Section(BaseModel):
    model_config = ConfigDict(extra="ignore")  # Harbor's other keys (healthcheck, mcp_servers, ...) unused here


class AgentSection(_Section):
    timeout_sec: float | None = Field(None, gt=0)


class VerifierSection(_Section):
    timeout_sec: float = Field(600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    environment_mode: Literal["shared", "separate"] | None = None
    environment: dict[str, Any] | None = None

    @property
    def separate(self) -> bool:
        return self.environment_mode == "separate" or (self.environment_mode is None and self.environment is not None)


class EnvironmentSection(_Section):
    docker_image: str | None = None
    workdir: str | None = None
    cpus: float | None = Field(None, gt=0)
    memory_mb: int | None = Field(None, gt=0)
    gpus: int | None = Field(None, ge=0)
    network_mode: Literal["public", "no-network", "allowlist"] = "public"
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        """Harbor's deprecated forms: `memory = "1G"`, `allow_internet = false`."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        memory = data.pop("memory", None)
        if isinstance(memory, str):
            data.setdefault("memory_mb", _size_mb(memory))
        allow = data.pop("allow_internet", None)
        if allow is not None and "network_mode" not in data:
            data["network_mode"] = "public" if allow else "no-network"
        return data


class TaskToml(_Section):
    schema_version: str = "1.4"
    task: dict[str, Any] | None = None  # [task]: name "org/name", description, ...
    metadata: dict[str, Any] = Field(default_factory=dict)
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    steps: list[dict[str, Any]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _version(cls, data: Any) -> Any:
        if isinstance(data, dict) and "version" in data:  # Harbor's legacy key
            data = dict(data)
            data.setdefault("schema_version", data.pop("version"))
        return data


def _size_mb(size: str) -> int:
    """Harbor's "1G" / "512M" / "2048K" sizes in MB."""
    text = size.strip().upper()
    scale = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}.get(text[-1:])
    if scale is None:
        raise ValueError(f"memory: {size!r} is not a size like 1G or 512M")
    return int(float(text[:-1]) * scale)


def strip_canary(text: str) -> str:
    """The instruction without its leading canary comment lines and the blank lines after them."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and _CANARY.match(lines[i].strip()):
        i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    return "\n".join(lines[i:])


class HarborTask(BaseModel):
    """One Harbor task folder, read."""

    name: str  # [task].name, else the folder's name
    path: str  # the task folder, absolute
    instruction: str
    config: TaskToml
    workdir: str

    @property
    def task_id(self) -> str:
        return self.name.replace("/", "__")

    @property
    def tests(self) -> Path:
        return Path(self.path) / "tests"

    @property
    def solution(self) -> Path:
        return Path(self.path) / "solution"

    def fields(self) -> dict[str, Any]:
        """The dataset row the `harbor` evaluator reads."""
        cfg = self.config
        return {
            "harbor": {
                "name": self.name,
                "path": self.path,
                "workdir": self.workdir,
                "verifier_timeout_s": cfg.verifier.timeout_sec,
                "verifier_env": cfg.verifier.env,
                "network_mode": cfg.environment.network_mode,
            }
        }

    def working_copy(self, dest: Path) -> Path | None:
        """What the Dockerfile copies from its build context into the working directory, assembled in
        `dest` (which must not exist); None when it copies nothing there."""
        env = Path(self.path) / "environment"
        wd = self.workdir.rstrip("/")
        placed = False
        for sources, target in Dockerfile.read(env / "Dockerfile").copies:
            bare = target.rstrip("/")
            if bare != wd and not bare.startswith(wd + "/"):
                continue
            into = dest / posixpath.relpath(bare, wd)
            for source in sources:
                src = (env / source).resolve()
                if not src.is_relative_to(env.resolve()) or not src.exists():
                    raise ConfigError(f"{self.path}: environment/Dockerfile copies {source!r}, not in environment/")
                if src.is_dir():
                    shutil.copytree(src, into, symlinks=True, dirs_exist_ok=True)
                else:
                    file = into / src.name if target.endswith("/") or len(sources) > 1 else into
                    file.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, file)
                placed = True
        if placed:
            dest.mkdir(parents=True, exist_ok=True)
        return dest if placed else None

    def runtime(self, base: RuntimeSpec | dict[str, Any] | None = None, repo: Path | None = None) -> dict[str, Any]:
        """`base` (a runtime block) completed for this task; keys `base` sets win."""
        spec = given(base)
        kind = spec.get("kind", "local")
        cls, env = RUNTIMES[kind], self.config.environment
        takes = cls.Settings.model_fields
        dockerfile = Path(self.path) / "environment" / "Dockerfile"
        # a kind that builds runs the task's own image: what its Dockerfile copies and installs is there
        build = "build" in takes and not env.docker_image and "image" not in spec and dockerfile.is_file()
        out: dict[str, Any] = {"repo": str(repo)} if repo is not None and not build else {}
        if build:
            out["build"] = str(dockerfile.parent)
        if "workdir" in takes:  # where its solutions and tests expect the files: every kind that can put them there
            out["workdir"] = self.workdir
        if cls.in_image:
            if env.docker_image and cls.pulls:
                out["image"] = cls.image_ref(env.docker_image)
            limits = {"cpus": env.cpus, "memory": f"{env.memory_mb}m" if env.memory_mb else None, "gpus": env.gpus}
            out |= {k: v for k, v in limits.items() if k in takes and v}
        return out | spec

    def task_spec(
        self,
        harness: dict[str, Any],
        evaluator: str = "harbor",
        runtime: RuntimeSpec | dict[str, Any] | None = None,
        repo: Path | None = None,
        **task: Any,
    ) -> TaskSpec:
        """A TaskSpec for this task: its instruction, its fields for the evaluator, `runtime` completed,
        its agent timeout (unless `task` sets one)."""
        if self.config.agent.timeout_sec is not None:
            task.setdefault("agent_timeout_s", self.config.agent.timeout_sec)
        return TaskSpec(
            task_id=task.pop("task_id", self.task_id),
            instruction=self.instruction,
            fields=self.fields(),
            harness=harness,
            runtime=self.runtime(runtime, repo),
            evaluator={"kind": evaluator, "config": task.pop("evaluator_config", {})},
            **task,
        )


def load_task(folder: str | Path) -> HarborTask:
    """One task folder, checked; a `ConfigError` names the folder and what is wrong."""
    folder = Path(folder).resolve()
    for need in ("task.toml", "instruction.md", "tests/test.sh"):
        if not (folder / need).is_file():
            raise ConfigError(f"{folder}: not a Harbor task: no {need}")
    try:
        config = TaskToml.model_validate(tomllib.loads((folder / "task.toml").read_text()))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{folder}/task.toml: not TOML: {exc}") from exc
    except ValidationError as exc:
        raise ConfigError(f"{folder}/task.toml: " + "; ".join(problems(exc, whole="task.toml"))) from exc
    if config.verifier.separate:
        raise ConfigError(f"{folder}/task.toml: [verifier] in a separate environment is not supported")
    if config.steps:
        raise ConfigError(f"{folder}/task.toml: multi-step tasks ([[steps]]) are not supported")
    instruction = strip_canary((folder / "instruction.md").read_text())
    if not instruction.strip():
        raise ConfigError(f"{folder}/instruction.md: empty")
    if not config.environment.docker_image and not (folder / "environment").is_dir():
        raise ConfigError(f"{folder}: no environment/ and no [environment].docker_image")
    name = (config.task or {}).get("name") or folder.name
    workdir = config.environment.workdir or Dockerfile.read(folder / "environment" / "Dockerfile").workdir
    return HarborTask(
        name=name, path=str(folder), instruction=instruction, config=config, workdir=workdir or DEFAULT_WORKDIR
    )


def load_dataset(folder: str | Path) -> list[HarborTask]:
    """Every task under `folder` (itself a task, or task folders at any depth), sorted by path."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"{folder}: not a folder of Harbor tasks")
    found = [folder] if (folder / "task.toml").is_file() else sorted(p.parent for p in folder.rglob("task.toml"))
    tasks, seen = [], {}
    for path in found:
        if any(parent in seen.values() for parent in path.parents):
            continue  # a task's own files (a step, a fixture) are not tasks
        task = load_task(path)
        if task.task_id in seen:
            raise ConfigError(f"{path}: task {task.name!r} is also {seen[task.task_id]}")
        seen[task.task_id] = path
        tasks.append(task)
    if not tasks:
        raise ConfigError(f"{folder}: no Harbor task (no task.toml) in it")
    return tasks


BUNDLED = Path(__file__).parent / "bundled" / "harbor"


def bundled() -> list[HarborTask]:
    """The bundled Harbor-format tasks (nemo_polar/tasks/bundled/harbor/)."""
    return load_dataset(BUNDLED)
