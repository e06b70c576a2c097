"""A bundled task as data: a tiny repo, an issue, its fix, a wrong fix and the hidden tests.

Changes are written as edits, not diffs, so a task reads like the code it describes: each edit is
`(old, new)` where `old` occurs exactly once in the file, or `("", text)`, which appends `text` (and
creates the file when it does not exist). The unified diffs (`patch`, `test_patch`, `wrong_patch`)
are rendered from the edits, so they always match the files.
"""

from __future__ import annotations

import difflib
import textwrap
from dataclasses import dataclass, field

Edits = dict[str, list[tuple[str, str]]]


def src(text: str) -> str:
    """Source text written indented in a task module: dedented, one final newline."""
    return textwrap.dedent(text).strip("\n") + "\n"


def append(text: str) -> tuple[str, str]:
    """An edit adding `text` (indented source) at the end of a file, after two blank lines."""
    return ("", "\n\n" + src(text))


# How hidden tests compare: `==` would ask the result's own __eq__, which is the code under test's to write (an
# object equal to everything passes every `==`); `same` asks the types first, all the way down.
SAME = src("""
    def same(got, want):
        \"\"\"Equal, and of exactly the same types all the way down.\"\"\"
        if type(got) is not type(want):
            return False
        if type(want) is dict:
            return same(sorted(got.items(), key=repr), sorted(want.items(), key=repr))
        if type(want) in (list, tuple):
            return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
        return got == want
    """)


def append_hidden(text: str) -> tuple[str, str]:
    """`append` of hidden tests, with `same` defined before them."""
    return ("", "\n\n" + SAME + "\n\n" + src(text))


@dataclass(frozen=True)
class BundledTask:
    name: str
    problem_statement: str
    files: dict[str, str]
    fix: Edits
    wrong_fix: Edits
    hidden_tests: Edits
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    summary: str = ""  # what kind of bug, for listings
    version: str = "0.1"
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def instance_id(self) -> str:
        return f"polar-bundled__{self.name}-1"

    @property
    def repo(self) -> str:
        return f"polar-bundled/{self.name}"

    @property
    def patch(self) -> str:
        return render(self.files, self.fix)

    @property
    def test_patch(self) -> str:
        return render(self.files, self.hidden_tests)

    @property
    def wrong_patch(self) -> str:
        return render(self.files, self.wrong_fix)


def apply_edits(files: dict[str, str], edits: Edits) -> dict[str, str]:
    out = dict(files)
    for path, changes in edits.items():
        text = out.get(path)
        for old, new in changes:
            if old == "":
                text = (text or "") + new
                continue
            if text is None or text.count(old) != 1:
                found = 0 if text is None else text.count(old)
                raise ValueError(f"{path}: edit anchor found {found} times, not once: {old[:60]!r}")
            text = text.replace(old, new)
        out[path] = text
    return out


def render(files: dict[str, str], edits: Edits) -> str:
    """The edits as a git-style unified diff against `files` (new files included)."""
    after = apply_edits(files, edits)
    parts = []
    for path in sorted(edits):
        old, new = files.get(path), after[path]
        if old == new:
            continue
        head = [f"diff --git a/{path} b/{path}\n"]
        if old is None:
            head += ["new file mode 100644\n", "--- /dev/null\n"]
        else:
            head += [f"--- a/{path}\n"]
        head.append(f"+++ b/{path}\n")
        body = difflib.unified_diff((old or "").splitlines(True), new.splitlines(True), n=3)
        parts.append("".join(head) + "".join(list(body)[2:]))  # difflib's own ---/+++ lines replaced above
    return "".join(parts)
