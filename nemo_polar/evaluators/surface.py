"""The test surface: what in an agent's change could alter how the hidden tests are collected, run or
reported, rather than the code they test. The `tests` evaluator leaves it out of the applied patch, so a
file the task had stays as the task had it and a file the task did not have is not there, and says which
paths and why (`details.left_out`). docs/rewards.md lists the rules and the legitimate changes they keep.

- the runner's configuration: pytest.ini, .pytest.ini, pytest.toml, .pytest.toml, tox.ini, setup.cfg,
  pyproject.toml and conftest.py at any depth (pytest looks for them upward from the tests it is given,
  and `addopts` loads plugins by name);
- the interpreter's start-up hooks: sitecustomize, usercustomize, *.pth;
- package metadata: *.dist-info, *.egg-info, *.egg-link (a `pytest11` entry point is loaded at start-up);
- a new module or package named as one the test interpreter already has (its standard library, pytest,
  pluggy, what is installed beside them), in a folder that can be on sys.path: the working copy's root
  (`python -m pytest` puts it first) or any folder without `__init__.py` (pytest inserts those). Inside a
  package the same names are the package's own (`mypkg/types.py` is kept);
- a file the task already had among its tests: test modules (test_*.py, *_test.py, tests.py) and every
  file of a folder that holds test modules (the hidden tests import their helpers);
- the files the hidden tests own (`test_patch`), as SWE-bench resets them.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable

from .base import Sandbox
from .patch import git, patch_paths

RUNNER_CONFIG = frozenset(
    {
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
        "conftest.py",
    }
)
STARTUP = frozenset({"sitecustomize", "usercustomize"})
METADATA = (".dist-info", ".egg-info", ".egg-link")
MODULE_SUFFIXES = (".py", ".pyc", ".pyo", ".so", ".pyd")
TEST_MODULE = re.compile(r"^(test_.+|.+_test|tests)\.py$")
# never the working copy's, whatever the interpreter reports: the runner, and the guard we load into it
RESERVED = frozenset({"pytest", "_pytest", "pluggy", "py", "polar_pytest_guard"})
# the interpreter's top-level module names, with nothing of the working copy on its path (-I)
NAMES = (
    "import json, pkgutil, sys\n"
    "names = set(sys.builtin_module_names) | set(getattr(sys, 'stdlib_module_names', ()))\n"
    "names.update(m[1] for m in pkgutil.iter_modules())\n"
    "print(json.dumps(sorted(names)))\n"
)
NAMES_TIMEOUT_S = 60.0
_DELETED = re.compile(r"^diff --git a/(\S+) b/\S+\n(?:old mode .*\n|new mode .*\n)*deleted file mode", re.M)

OWNED = "owned by the hidden tests (test_patch): the task's version is run"
CONFIG = "the test runner's configuration: the task's version is run"
HOOK = "an interpreter start-up hook: left out"
PACKAGE_METADATA = "package metadata (entry points load pytest plugins): left out"
TEST_FILE = "a test file the task already had: the task's version is run"


def _module(component: str) -> str:
    return component.split(".", 1)[0]


def _importable(parts: list[str], i: int) -> bool:
    """Whether `parts[i]` can be imported as a module: a folder, or a file with a module's suffix."""
    return i < len(parts) - 1 or parts[i].endswith(MODULE_SUFFIXES)


def left_out(
    changed: Iterable[str],
    base: Iterable[str],
    names: Iterable[str],
    hidden: Iterable[str] = (),
    deleted: Iterable[str] = (),
) -> dict[str, str]:
    """Path -> why, for each `changed` path on the test surface. `base`: the files of the evaluation copy
    before the agent's patch (the task's, and the hidden tests'); `names`: the test interpreter's
    top-level modules; `hidden`: the files the hidden tests own; `deleted`: files the patch removes."""
    base, hidden = set(base), set(hidden)
    changed = list(dict.fromkeys(changed))
    shadowable = set(names) | RESERVED
    packages = {
        p.rpartition("/")[0] for p in (base | set(changed)) - set(deleted) if p.rpartition("/")[2] == "__init__.py"
    }
    modules: dict[str, set[str]] = {}  # folder -> the module names the task has there
    test_folders = set()
    for path in base:
        parts = path.split("/")
        for i in range(len(parts)):
            modules.setdefault("/".join(parts[:i]), set()).add(_module(parts[i]))
        if TEST_MODULE.match(parts[-1]):
            test_folders.add("/".join(parts[:-1]))
    out = {}
    for path in changed:
        parts = path.split("/")
        name, folders = parts[-1], ["/".join(parts[:i]) for i in range(len(parts))]
        if path in hidden:
            out[path] = OWNED
        elif name in RUNNER_CONFIG:
            out[path] = CONFIG
        elif name.endswith(".pth") or any(_module(p) in STARTUP for i, p in enumerate(parts) if _importable(parts, i)):
            out[path] = HOOK
        elif any(p.endswith(METADATA) for p in parts):
            out[path] = PACKAGE_METADATA
        elif path in base and (TEST_MODULE.match(name) or any(f in test_folders for f in folders[1:])):
            out[path] = TEST_FILE
        else:
            for i, folder in enumerate(folders):
                module = _module(parts[i])
                on_path = i == 0 or folder not in packages
                if (
                    on_path
                    and _importable(parts, i)
                    and module in shadowable
                    and module not in modules.get(folder, ())
                ):
                    where = f"{folder}/" if folder else "the working copy's root"
                    out[path] = f"a new module {module!r} in {where} shadows the interpreter's own: left out"
                    break
    return out


async def interpreter_names(box: Sandbox, python: str) -> set[str]:
    """The top-level modules `python` has in `box` without the working copy; this interpreter's standard
    library when it cannot say (the reserved names are added either way)."""
    try:
        rc, out, _ = await box.exec([python, "-I", "-c", NAMES], None, NAMES_TIMEOUT_S)
        if rc == 0:
            return set(json.loads(out.strip().splitlines()[-1]))
    except (OSError, ValueError, IndexError):
        pass
    return set(sys.builtin_module_names) | set(sys.stdlib_module_names)


async def surface_of(box: Sandbox, hidden: list[str], python: str) -> dict[str, list[str]]:
    """What `left_out` judges a patch against, read from the evaluation copy in `box` before the agent's patch
    (the hidden tests applied): its files, and the test interpreter's modules. Read once, as the copy is made."""
    _, listed, _ = await git(box, ["ls-files", "-z"])
    base = {p for p in listed.split("\0") if p} | set(hidden)
    return {"base": sorted(base), "names": sorted(await interpreter_names(box, python))}


async def surface_changes(
    box: Sandbox, patch: str, hidden: list[str], surface: dict[str, list[str]]
) -> dict[str, str]:
    """`left_out` for `patch` against `surface` (`surface_of` the evaluation copy in `box`)."""
    changed = await patch_paths(box, patch)
    if not changed:
        return {}
    return left_out(changed, surface["base"], surface["names"], hidden, _DELETED.findall(patch))
