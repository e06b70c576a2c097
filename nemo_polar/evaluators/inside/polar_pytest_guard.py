"""A pytest plugin the `tests` evaluator loads first into every graded run (`-p polar_pytest_guard`).

The code under test runs in pytest's own process, so nothing in that process can be trusted to say what
happened. The guard is a tripwire, not a wall: it records, apart from pytest's report, what it saw, and
checks at the end that nothing of the working copy took over the runner. The evaluator reads its record
(`POLAR_GUARD`, a file outside the working copy) and pays nothing when:

- the run ended without the guard's last record (the code under test ended the process: `os._exit`);
- a test the summary calls passed did not pass as the guard saw it (a rewritten report or summary);
- a function pytest's or pluggy's modules or classes hold was compiled from the working copy, or is one
  made by exec that replaced what the guard saw at start-up (a monkeypatch of the runner; pytest and its
  installed plugins patch pytest too, from their own files);
- a plugin registered without a name comes from the working copy (other than a conftest.py), or one
  loaded by its entry point belongs to a distribution there (a `*.dist-info` the agent wrote);
- a module of the working copy was imported under a name the interpreter already has (a shadowed
  standard-library, pytest or site-packages module).

Loaded before any conftest.py or module of the working copy. It takes itself out of the environment
(POLAR_GUARD, PYTEST_ADDOPTS, PYTHONPATH) so that a pytest the tests start runs without it. Standard
library and pytest only, and old Pythons' syntax: it runs in the task image's interpreter.
"""

import functools
import json
import os
import sys
import types

NAME = "polar_pytest_guard"
RUNNER = ("pytest", "_pytest", "pluggy")

_state = os.environ.pop("POLAR_GUARD", None)
_here = os.path.dirname(os.path.abspath(__file__))


def _unlisted(variable, sep, item):
    parts = [p for p in os.environ.get(variable, "").split(sep) if p and p != item]
    if parts:
        os.environ[variable] = sep.join(parts)
    else:
        os.environ.pop(variable, None)


_unlisted("PYTHONPATH", os.pathsep, _here)
os.environ["PYTEST_ADDOPTS"] = os.environ.get("PYTEST_ADDOPTS", "").replace("-p " + NAME, "").strip()
_unlisted("PYTEST_ADDOPTS", " ", "")
_work = os.path.realpath(os.getcwd())
_outcomes = {}  # node id -> passed | failed | skipped (the worst of its phases)
_config = []
_RANK = {"passed": 0, "skipped": 1, "failed": 2}


def _write(record):
    if _state is None:
        return
    with open(_state, "a") as f:
        f.write(json.dumps(record) + "\n")


def _runner_module(name):
    return name.split(".")[0] in RUNNER


def _functions():
    """(where, function) for every function pytest's and pluggy's modules and their classes hold."""
    for name, module in list(sys.modules.items()):
        if module is None or not _runner_module(name):
            continue
        for attr, value in list(vars(module).items()):
            yield name + "." + attr, value
            if isinstance(value, type) and _runner_module(getattr(value, "__module__", "") or ""):
                for key, member in list(vars(value).items()):
                    yield name + "." + attr + "." + key, member


CODED = (types.FunctionType, types.MethodType, classmethod, staticmethod, property, functools.partial)


def _codes(value):
    """The code objects behind a function, method, property or partial."""
    if not isinstance(value, CODED):
        return
    parts = [value, getattr(value, "__func__", None), getattr(value, "func", None)]
    parts += [getattr(value, accessor, None) for accessor in ("fget", "fset", "fdel")]
    for part in parts:
        code = getattr(part, "__code__", None)
        if isinstance(code, types.CodeType):
            yield code


def _in_work(path, _seen={}):  # noqa: B006 - the cache: thousands of functions share a few dozen files
    if not path or not os.path.isabs(path):  # "<string>": made by exec, e.g. a dataclass's methods
        return False
    if path not in _seen:
        real = os.path.realpath(path)
        _seen[path] = real == _work or real.startswith(_work + os.sep)
    return _seen[path]


_start = {where: id(value) for where, value in _functions() if callable(value)}
_write({"started": os.getpid()})


def pytest_configure(config):
    _config.append(config)


pytest_configure.tryfirst = True


def pytest_runtest_logreport(report):
    nodeid = _config[0].cwd_relative_nodeid(report.nodeid) if _config else report.nodeid  # as -rA writes it
    outcome = report.outcome
    if getattr(report, "wasxfail", None) is not None:
        outcome = "failed" if outcome == "passed" and report.when == "call" else "passed"  # xpass | xfail
    known = _outcomes.get(nodeid, "passed")
    _outcomes[nodeid] = outcome if _RANK.get(outcome, 2) > _RANK[known] else known


pytest_runtest_logreport.tryfirst = True


def _tampered(config):
    found, seen = [], set()
    for where, value in _functions():
        paths = [code.co_filename for code in _codes(value)]
        if isinstance(value, type):  # a class put in place of pytest's: where it was defined
            paths.append(getattr(sys.modules.get(value.__module__), "__file__", None))
        for path in paths:
            replaced = path and not os.path.isabs(path) and where in _start and id(value) != _start[where]
            if (_in_work(path) or replaced) and id(value) not in seen:  # one object has many names: said once
                found.append("pytest's " + where + " replaced by code of the working copy")
                seen.add(id(value))
    for name, plugin in config.pluginmanager.list_name_plugin():
        module = plugin if hasattr(plugin, "__file__") else sys.modules.get(type(plugin).__module__)
        path = getattr(module, "__file__", None)
        if name == str(id(plugin)) and _in_work(path) and os.path.basename(path or "") != "conftest.py":
            found.append("unnamed plugin from the working copy: " + str(path))
    for plugin, dist in config.pluginmanager.list_plugin_distinfo():
        where = str(getattr(dist, "locate_file", lambda _: "")(""))
        if _in_work(where):
            found.append(
                "plugin " + str(getattr(plugin, "__name__", plugin)) + " of a distribution in the working copy"
            )
    names = set(sys.builtin_module_names) | set(getattr(sys, "stdlib_module_names", ()))
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if "." not in name and (name in names or _runner_module(name)) and _in_work(path):
            found.append("shadowed module " + name + ": " + str(path))
    return sorted(set(found))


def pytest_unconfigure(config):
    """The last hook: after the summary is printed."""
    _write({"finished": True, "tampered": _tampered(config), "outcomes": _outcomes})


pytest_unconfigure.trylast = True
