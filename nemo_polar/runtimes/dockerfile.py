"""What a Dockerfile says, read without building it: its base images, its working directory, what it copies from
its build context. Harbor tasks are read with it (tasks/harbor.py), and the docker runtime checks a build's bases
before building (docker.py)."""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Dockerfile:
    bases: list[str]  # the images its stages start FROM (not `scratch`, not an earlier stage)
    workdir: str | None
    copies: list[tuple[list[str], str]]  # (sources in the build context, absolute destination)

    @classmethod
    def read(cls, path: Path) -> Dockerfile:
        bases: list[str] = []
        stages: set[str] = set()
        workdir, copies = None, []
        text = path.read_text() if path.is_file() else ""
        for line in re.sub(r"\\\n", " ", text).splitlines():
            words = shlex.split(line, comments=True) if line.strip() else []
            if not words:
                continue
            op, args = words[0].upper(), words[1:]
            if op == "FROM" and args:
                names = [a for a in args if not a.startswith("--")]
                if names and names[0].lower() != "scratch" and names[0] not in stages:
                    bases.append(names[0])
                if len(names) == 3 and names[1].upper() == "AS":
                    stages.add(names[2])
            elif op == "WORKDIR" and args:
                workdir = posixpath.normpath(posixpath.join(workdir or "/", args[-1]))
            elif op in ("COPY", "ADD"):
                if any(a.startswith("--from") for a in args):
                    continue  # from another stage or image, not the build context
                parts = [a for a in args if not a.startswith("--")]
                if len(parts) >= 2 and not any("://" in p for p in parts):
                    dest = parts[-1]
                    absolute = posixpath.join(workdir or "/", dest)
                    copies.append((parts[:-1], posixpath.normpath(absolute) + ("/" if dest.endswith("/") else "")))
        return cls(bases, workdir, copies)
