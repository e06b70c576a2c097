"""A session's harness logs, kept outside its sandbox so they outlive it: the full stdout and stderr
(each capped) and the harness's own small log and transcript files from its HOME."""

from __future__ import annotations

import shutil
from pathlib import Path

STREAM_CAP = 2 << 20  # bytes kept of stdout and of stderr: the tail, where a failure shows
FILE_CAP = 2 << 20  # a harness file larger than this is left out
TOTAL_CAP = 16 << 20  # all harness files of one session together


def capped(text: str, cap: int = STREAM_CAP) -> str:
    data = text.encode("utf-8", "replace")
    if len(data) <= cap:
        return text
    return f"[... {len(data) - cap} bytes cut ...]\n" + data[-cap:].decode("utf-8", "replace")


def keep_logs(folder: Path, stdout: str, stderr: str, home: Path, globs: tuple[str, ...] = ()) -> Path:
    """Write `folder/stdout.txt`, `folder/stderr.txt` and copies of the files under `home` that
    match `globs` (into `folder/home/`, same relative paths, within the caps). Returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stdout.txt").write_text(capped(stdout))
    (folder / "stderr.txt").write_text(capped(stderr))
    total, skipped = 0, []
    for path in sorted({p for g in globs for p in home.glob(g)}):
        if not path.is_file() or path.is_symlink():
            continue
        size = path.stat().st_size
        rel = path.relative_to(home)
        if size > FILE_CAP or total + size > TOTAL_CAP:
            skipped.append(f"{rel} ({size} bytes)")
            continue
        dest = folder / "home" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
        total += size
    if skipped:
        (folder / "skipped.txt").write_text("left out, too large:\n" + "\n".join(skipped) + "\n")
    return folder
