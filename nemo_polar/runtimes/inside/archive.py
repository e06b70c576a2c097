"""A working copy carried from one sandbox to another: packed where the agent left it, unpacked into a fresh
sandbox of the same image, where it is graded (the `harbor` evaluator's `verifier: fresh`).

    python -I -S archive.py pack FOLDER ARCHIVE       FOLDER's contents, as they are (links as links)
    python -I -S archive.py unpack ARCHIVE FOLDER     FOLDER emptied, then the archive's members in it

Unpacking takes only what stays in FOLDER: no absolute name, no `..`, no link whose target leaves it, no
device (tarfile's "data" filter where the Python has it, the same rules otherwise), so a planted member
cannot write where the verifier reads. Standard library only: it runs with the toolchain's Python, else the
image's.
"""

import os
import shutil
import sys
import tarfile


def _inside(folder, name):
    path = os.path.realpath(os.path.join(folder, name))
    return path == folder or path.startswith(folder + os.sep)


def _safe(member, folder):
    if member.name.startswith("/") or ".." in member.name.split("/") or not _inside(folder, member.name):
        return False
    if member.issym():
        return _inside(folder, os.path.join(os.path.dirname(member.name), member.linkname))
    if member.islnk():
        return _inside(folder, member.linkname)
    return member.isfile() or member.isdir()


def pack(folder, archive):
    with tarfile.open(archive, "w") as tar:
        for name in sorted(os.listdir(folder)):
            tar.add(os.path.join(folder, name), arcname=name, recursive=True)


def unpack(archive, folder):
    folder = os.path.realpath(folder)
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if _safe(m, folder)]
        if hasattr(tarfile, "data_filter"):
            tar.extractall(folder, members=members, filter="data")
        else:
            tar.extractall(folder, members=members)
        left = len(tar.getmembers()) - len(members)
    if left:
        print(f"archive: left out {left} members that would leave {folder}", file=sys.stderr)


if __name__ == "__main__":
    action, source, target = sys.argv[1:4]
    (pack if action == "pack" else unpack)(source, target)
