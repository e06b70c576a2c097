"""What is never shown: a task's secrets, wherever a spec, a result or a log line would show them.

A task's secrets are every value of every `env` it sets (the harness's, the runtime's, each set-up step's)
and the value of every key it names in `secret_keys` (at any depth of the spec: a dataset field, an
evaluator or harness setting). What is shown has them replaced by `MASK`:

    Secrets.spec     a spec: each secret key's value masked, and any secret value met in its other text
    Secrets.scrub    free text (a result's error, a node's cause, what a harness printed): any occurrence
    hide, hidden     the values a process has seen in the tasks it took; `logs.install` scrubs them from
                     every log line

Only what is shown is redacted: a gateway node's dispatch carries the real values and the stores keep them,
since the harness needs them to run. Identifiers (`KEPT`) are never scrubbed: a reader follows them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MASK = "[redacted]"
ENV = "env"  # every mapping under this key, anywhere in a spec, is an environment: all its values are secret
MIN_CHARS = 6  # a shorter value is masked where it is set, never searched for in text (every "1" would go)
KEPT = frozenset({"session_id", "task_id", "node_id", "proxy_session_id", "traces_path", "logs"})
MAX_HIDDEN = 4096  # the distinct values `hide` keeps for log lines, the most recent


@dataclass(frozen=True)
class Secrets:
    """One task's secrets: the keys whose values are masked and the values searched for in text."""

    keys: frozenset[str]
    values: tuple[str, ...]  # longest first: a value inside another is never left half shown

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> Secrets:
        """From a task spec as JSON (`TaskSpec.model_dump(mode="json")`)."""
        keys = frozenset(spec.get("secret_keys") or ())
        found: set[str] = set()
        _collect(spec, keys, found)
        return cls(keys, tuple(sorted((v for v in found if len(v) >= MIN_CHARS), key=len, reverse=True)))

    def spec(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of `spec` with each secret key's value masked (an `env`'s names kept, its values masked)."""
        return self.scrub(_masked(spec, self.keys))

    def scrub(self, value: Any) -> Any:
        """`value` (JSON) with every occurrence of a secret value in its strings masked; `KEPT` keys left alone."""
        return scrub(value, self.values) if self.values else value


def scrub(value: Any, values: Collection[str]) -> Any:
    """`value` (strings, lists, mappings) with every occurrence of each of `values` (longest first) masked."""
    if isinstance(value, str):
        for secret in values:
            if secret in value:
                value = value.replace(secret, MASK)
        return value
    if isinstance(value, Mapping):
        return {k: v if k in KEPT else scrub(v, values) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v, values) for v in value]
    return value


def _collect(node: Any, keys: frozenset[str], found: set[str]) -> None:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in keys:
                _strings(value, found)
            elif key == ENV and isinstance(value, Mapping):
                _strings(list(value.values()), found)
            else:
                _collect(value, keys, found)
    elif isinstance(node, list):
        for value in node:
            _collect(value, keys, found)


def _strings(node: Any, found: set[str]) -> None:
    if isinstance(node, str):
        found.add(node)
    elif isinstance(node, Mapping):
        for value in node.values():
            _strings(value, found)
    elif isinstance(node, list):
        for value in node:
            _strings(value, found)
    elif node is not None and not isinstance(node, bool):
        found.add(str(node))


def _masked(node: Any, keys: frozenset[str]) -> Any:
    if isinstance(node, Mapping):
        out = {}
        for key, value in node.items():
            if key in keys:
                out[key] = MASK
            elif key == ENV and isinstance(value, Mapping):
                out[key] = dict.fromkeys(value, MASK)
            else:
                out[key] = _masked(value, keys)
        return out
    if isinstance(node, list):
        return [_masked(v, keys) for v in node]
    return node


# --- what a process's log lines never show ----------------------------------------------------

_lock = threading.Lock()
_hidden: OrderedDict[str, None] = OrderedDict()
_snapshot: tuple[str, ...] = ()


def hide(values: Iterable[str]) -> None:
    """Never show these values in a log line of this process (`logs.install`); the last `MAX_HIDDEN` are kept."""
    global _snapshot
    with _lock:
        for value in values:
            _hidden[value] = None
            _hidden.move_to_end(value)
        while len(_hidden) > MAX_HIDDEN:
            _hidden.popitem(last=False)
        _snapshot = tuple(sorted(_hidden, key=len, reverse=True))


def hidden() -> tuple[str, ...]:
    """The values `hide` was given (longest first)."""
    return _snapshot


__all__ = ["ENV", "KEPT", "MASK", "MIN_CHARS", "Secrets", "hidden", "hide", "scrub"]
