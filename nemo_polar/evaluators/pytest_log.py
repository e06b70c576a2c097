"""Per-test outcomes from pytest's `-rA` short summary.

Lines look like `PASSED tests/t.py::test_a[x - y]` or `FAILED tests/t.py::test_b - AssertionError`.
A node id may itself hold spaces and ` - ` inside its parameter brackets, so the id is found by
matching the ids we expect first (longest first), then by bracket balance. Only the short test summary
section is read when it is present: a test's own output could print lines that look like results.
"""

from __future__ import annotations

import re

STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")
PASSING = frozenset({"PASSED", "XFAIL"})
SUMMARY = re.compile(r"^=+ short test summary info =+\s*$", re.M)
_LINE = re.compile(rf"^({'|'.join(STATUSES)}) (.+)$")


def parse_summary(log: str, expected: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    """Node id -> status. A test listed twice (e.g. failed in the call, errored in teardown) keeps the
    worse of the two outcomes."""
    marks = list(SUMMARY.finditer(log))
    if marks:
        log = log[marks[-1].end() :]
    known = sorted(set(expected), key=len, reverse=True)
    result: dict[str, str] = {}
    for line in log.splitlines():
        m = _LINE.match(line.rstrip())
        if m is None:
            continue
        status, rest = m.groups()
        if status == "SKIPPED" and rest.startswith("["):  # `SKIPPED [1] path:line: reason` names no test
            continue
        node = _node_id(rest, known)
        if node and (node not in result or result[node] in PASSING):
            result[node] = status
    return result


def _node_id(rest: str, known: list[str]) -> str:
    for node in known:
        if rest == node or rest.startswith(node + " "):
            return node
    head, sep, tail = rest.partition("[")
    if " " in head or not sep:  # no parameters: the id ends at the first space
        return rest.split(" ", 1)[0]
    depth = 1
    for i, ch in enumerate(tail):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth == 0:
            return head + "[" + tail[: i + 1]
    return rest.split(" - ", 1)[0]
