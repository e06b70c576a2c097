"""The harness toolchain: one read-only folder with everything the harnesses need, mounted by every
runtime at one fixed path (`/polar/tools` in docker, apptainer and image; `/tmp/polar/tools` under
bubblewrap), so that no harness depends on what the task's image has.

    tools/                      .deps/tools, or POLAR_TOOLS
      node/bin/node             Node.js (the host's binary, its C++ runtime in lib/)
      node/bin/<cli>            the pinned CLIs (npm --prefix tools/node)
      python/                   Python 3.11 (pyenv's build, relocated): mini-swe-agent, and our in-sandbox scripts
      openhands/                Python 3.12 (the same, relocated) with the OpenHands SDK
      lib/                      every shared library the above load beyond glibc's own

Only glibc itself (libc, libm, libdl, libpthread, librt, libcrypt, ld.so) and the C++ runtime (libstdc++,
libgcc_s: in every glibc image with a package manager, and this machine's needs glibc 2.36) come from
the image: the binaries were built against this machine's glibc, so the image needs a glibc at least as
new as the newest symbol version they use (`MANIFEST.json`'s `glibc`; 2.35 here: Ubuntu 22.04, Debian 12,
RHEL 10 and later). Each binary or library that needs a library from lib/ finds it through its own RUNPATH
(`$ORIGIN/...`), never through LD_LIBRARY_PATH, which would leak into the agent's own commands.

Standard library only: scripts/setup.sh runs it before any environment exists.

    python3 toolchain.py python SRC_PREFIX DEST     copy an interpreter (no site-packages, no tests)
    python3 toolchain.py bundle TOOLS [SUBDIR]       copy the libraries SUBDIR's binaries need into TOOLS/lib
    python3 toolchain.py manifest TOOLS              TOOLS/MANIFEST.json: sizes and the glibc it needs
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# where the folder is on this machine, and the paths in it the harnesses launch. Not `paths.DEPS`: scripts/setup.sh
# runs this file as a script, where no package import works (tests/runtimes check the two agree)
DEPS = Path(os.environ.get("POLAR_DEPS", Path(__file__).resolve().parents[2] / ".deps"))
TOOLS = Path(os.environ.get("POLAR_TOOLS") or DEPS / "tools")
NODE = "node/bin/node"
PYTHON = "python/bin/python3"  # also runs forward.py inside sandboxes
# our own scripts that run inside a sandbox (forward.py, openhands_runner.py): mounted beside the tools
SCRIPTS = Path(__file__).resolve().parent / "inside"

# glibc's own libraries (they must match the image's ld.so) and the C++ runtime: always the image's
GLIBC = re.compile(
    r"^(ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libresolv\.so\.2"
    r"|libutil\.so\.1|libanl\.so\.1|libnsl\.so\.1|libmvec\.so\.1|libthread_db\.so\.1|libBrokenLocale\.so\.1"
    r"|libcrypt\.so\.1|libnss_.*|libstdc\+\+\.so\.6|libgcc_s\.so\.1)$"
)
# parts of a Python install no harness needs
PYTHON_SKIP = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "__phello__", "lib2to3"}
EM_X86_64 = 62


def available() -> bool:
    """True when the toolchain's Node.js is there (scripts/setup.sh node)."""
    return (TOOLS / NODE).exists()


# --- reading ELF files -------------------------------------------------------------------------
def _elf_x86_64(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            head = f.read(20)
    except OSError:
        return False
    return len(head) == 20 and head[:4] == b"\x7fELF" and head[4] == 2 and int.from_bytes(head[18:20], "little") == 62


def _patchelf(*args: str) -> str | None:
    done = subprocess.run([_PATCHELF[0], *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


_PATCHELF = [os.environ.get("PATCHELF", "patchelf")]


def _host_libraries() -> dict[str, Path]:
    """soname -> path for this machine's x86-64 libraries (ldconfig's cache)."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    found: dict[str, Path] = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) \((.*)\) => (\S+)", line)
        if m and "x86-64" in m.group(2):
            found.setdefault(m.group(1), Path(m.group(3)))
    return found


def _rpath_dirs(path: Path, rpath: str) -> list[Path]:
    return [Path(entry.replace("$ORIGIN", str(path.parent))) for entry in rpath.split(":") if entry]


# --- bundling ----------------------------------------------------------------------------------
def bundle(tools: Path, under: Path | None = None) -> dict[str, int]:
    """Every x86-64 ELF under `under` (default: the whole toolchain) finds the libraries it needs beyond
    glibc in tools/lib: copied from this machine once, and reached through the file's RUNPATH."""
    tools = tools.resolve()
    lib = tools / "lib"
    lib.mkdir(exist_ok=True)
    host = _host_libraries()
    queue = [p for p in sorted((under or tools).resolve().rglob("*")) if p.is_file() and not p.is_symlink()]
    patched = copied = 0
    missing: set[str] = set()
    while queue:
        path = queue.pop()
        if not _elf_x86_64(path):
            continue
        needed = _patchelf("--print-needed", str(path))
        if not needed:  # static, or not dynamic at all
            continue
        names = needed.split()
        if any("musl" in n for n in names):  # a musl build beside the glibc one: never loaded here
            continue
        rpath = _patchelf("--print-rpath", str(path)) or ""
        # auditwheel's grafted libraries (pillow.libs, numpy.libs) have no RUNPATH: they find each other beside them
        # through the loading module's RPATH, which a RUNPATH of ours would stop them inheriting; so their folder is
        # where they look, and stays so ($ORIGIN) once patched
        dirs = [*_rpath_dirs(path, rpath), path.parent]
        beside = any((path.parent / n).exists() for n in names if not GLIBC.match(n))
        wanted = [n for n in names if not GLIBC.match(n) and not any((d / n).exists() for d in dirs)]
        if not wanted and not (beside and "$ORIGIN" not in rpath.split(":")):
            continue
        for name in wanted:
            if not (lib / name).exists():
                source = host.get(name)
                if source is None:
                    missing.add(name)
                    continue
                shutil.copy2(source.resolve(), lib / name)
                (lib / name).chmod(0o755)
                queue.append(lib / name)
                copied += 1
        entry = "$ORIGIN" if path.parent == lib else "$ORIGIN/" + os.path.relpath(lib, path.parent)
        if entry not in rpath.split(":"):
            path.chmod(path.stat().st_mode | 0o200)
            kept = [e for e in rpath.split(":") if e and "/.pyenv/" not in e]
            new = ":".join(
                kept + (["$ORIGIN"] if beside and "$ORIGIN" not in kept and entry != "$ORIGIN" else []) + [entry]
            )
            if _patchelf("--set-rpath", new, str(path)) is None:
                raise RuntimeError(f"patchelf could not set the RUNPATH of {path}")
            patched += 1
    if missing:
        print(f"toolchain: not on this machine, left to the image: {sorted(missing)}", file=sys.stderr)
    return {"patched": patched, "copied": copied, "missing": len(missing)}


def copy_python(prefix: Path, dest: Path) -> Path:
    """A pyenv (or any --enable-shared) Python at `prefix` as a relocatable interpreter at `dest`: the
    executable, libpython, the standard library without site-packages and tests, the headers. Its
    RUNPATH becomes $ORIGIN/../lib; the libraries its modules need are `bundle`'s job."""
    found = sorted(prefix.glob("bin/python3.*[0-9]"))
    if not found:
        raise FileNotFoundError(f"no bin/python3.X under {prefix}")
    version = found[-1].name.removeprefix("python")
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "bin").mkdir(parents=True)
    exe = dest / "bin" / f"python{version}"
    shutil.copy2(prefix / "bin" / f"python{version}", exe)
    for alias in ("python3", "python"):
        (dest / "bin" / alias).symlink_to(exe.name)
    (dest / "lib").mkdir()
    for so in prefix.glob(f"lib/libpython{version}*.so*"):
        if so.is_symlink():
            (dest / "lib" / so.name).symlink_to(os.readlink(so))
        else:
            shutil.copy2(so, dest / "lib" / so.name)
    stdlib = prefix / "lib" / f"python{version}"

    def skip(folder: str, names: list[str]) -> set[str]:
        top = Path(folder) == stdlib
        return {n for n in names if (top and n in PYTHON_SKIP) or n.startswith("_tkinter")}

    shutil.copytree(stdlib, dest / "lib" / f"python{version}", symlinks=True, ignore=skip)
    (dest / "lib" / f"python{version}" / "site-packages").mkdir()
    if (prefix / "include").is_dir():
        shutil.copytree(prefix / "include", dest / "include", symlinks=True)
    for path in [exe, *(dest / "lib").glob("libpython*.so*")]:
        rpath = "$ORIGIN/../lib" if path == exe else "$ORIGIN"
        if not path.is_symlink() and _patchelf("--set-rpath", rpath, str(path)) is None:
            raise RuntimeError(f"patchelf could not set the RUNPATH of {path}")
    return exe


def manifest(tools: Path) -> dict:
    """What the toolchain holds: MB per folder, and the newest glibc symbol version any of it needs."""
    sizes, newest = {}, (0, 0)
    for top in sorted(p for p in tools.iterdir() if p.is_dir()):
        total = 0
        for path in top.rglob("*"):
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
                if _elf_x86_64(path) and _patchelf("--print-needed", str(path)):
                    for major, minor in re.findall(rb"GLIBC_(\d+)\.(\d+)", path.read_bytes()):
                        newest = max(newest, (int(major), int(minor)))
        sizes[top.name] = round(total / 2**20)
    out = {"mb": sizes, "total_mb": sum(sizes.values()), "glibc": f"{newest[0]}.{newest[1]}"}
    (tools / "MANIFEST.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


def main(argv: list[str]) -> None:
    if len(argv) >= 3 and argv[0] == "python":
        print(copy_python(Path(argv[1]), Path(argv[2])))
    elif len(argv) >= 2 and argv[0] == "bundle":
        print(json.dumps(bundle(Path(argv[1]), Path(argv[2]) if len(argv) > 2 else None)))
    elif len(argv) == 2 and argv[0] == "manifest":
        print(json.dumps(manifest(Path(argv[1]))))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
