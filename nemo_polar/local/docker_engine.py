"""A Docker engine of our own on this machine, for the `docker` runtime's tests and for a user with one machine
(`polar cluster docker up`): Debian's `dockerd`, every file under one folder.

`root/` holds `data/` (the engine's `--data-root`: images, containers, their layers), `docker.pid`, `log/` and
`run/daemons.json`; its socket and `--exec-root` (its containerd's state and sockets) live in a short folder of the
temp dir named after the root, as a Unix socket's path must be short. It listens on its own Unix socket only and
touches no host network: `--iptables=false --ip6tables=false --bridge=none` (a session's
container runs with `--network none` and reaches the proxy through a bind-mounted socket, so it needs no bridge).
Clients find it through `DOCKER_HOST=unix://<root>/docker.sock`.

No registry is reachable from these machines, so images come from root filesystems: the set-up's Debian folders
(`.deps/rootfs/<name>`) are imported as `polar-<name>:local`, once per content (a label holds the folder's stamp).

Stopping: the containers it runs are removed, then dockerd gets SIGTERM (SIGKILL after `grace_s`) only while
/proc still names the process `up` started (`daemons.py`); dockerd stops the containerd it started. What the
engine mounted under its folders is checked to be gone, and the short folder is removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .. import daemons
from ..daemons import Daemon, wait
from ..errors import ConfigError
from ..paths import DEPS

ROOTFS = DEPS / "rootfs"
STAMP_LABEL = "nemo_polar.rootfs"  # on an imported image: the set-up's stamp of the folder it came from


def missing() -> str | None:
    """Why this machine cannot run the engine, or None."""
    if os.geteuid() != 0:
        return "a Docker engine of our own runs as root"
    if shutil.which("dockerd", path="/usr/sbin:/usr/bin:" + os.environ.get("PATH", "")) is None:
        return "no dockerd (scripts/setup.sh docker installs Debian's docker.io)"
    if _client() is None:
        return "no docker client on PATH"
    return None


def _client() -> str | None:
    return shutil.which("docker", path="/usr/bin:" + os.environ.get("PATH", ""))


def image_name(rootfs: str) -> str:
    """The image a set-up root filesystem (`bookworm`, `bookworm-python`) is imported as."""
    return f"polar-{rootfs}:local"


class DockerEngine:
    def __init__(self, root: str | Path, grace_s: float = 15.0):
        self.root = Path(root).resolve()
        self.grace_s = grace_s
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:12]
        self.run_dir = Path(tempfile.gettempdir()) / f"polar-docker-{digest}"
        self.socket = self.run_dir / "docker.sock"

    @property
    def env(self) -> dict[str, str]:
        """What a client (the docker CLI, the Python SDK our runtime uses) needs to find this engine."""
        return {"DOCKER_HOST": f"unix://{self.socket}"}

    def client(self, *argv: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        cli = _client()
        if cli is None:
            raise ConfigError("no docker client on PATH")
        try:
            return subprocess.run(
                [cli, *argv], env=os.environ | self.env, input=stdin, capture_output=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:  # an engine still starting can hold a client: not an answer
            return subprocess.CompletedProcess([cli, *argv], 124, b"", f"no answer in {timeout:.0f} s".encode())

    def _record(self) -> Path:
        return self.root / "run" / "daemons.json"

    def daemon(self) -> Daemon | None:
        try:
            return Daemon(**json.loads(self._record().read_text()))
        except FileNotFoundError:
            return None

    def alive(self) -> bool:
        d = self.daemon()
        return d is not None and d.alive()

    def ready(self) -> bool:
        return self.alive() and self.client("version", "--format", "{{.Server.Version}}", timeout=10).returncode == 0

    def up(self, timeout_s: float = 60.0) -> None:
        """Start dockerd; return once it answers, with the set-up's root filesystems imported. A running engine is
        left as it is."""
        why = missing()
        if why:
            raise ConfigError(f"cannot start a Docker engine here: {why}")
        if not self.alive():
            for d in (self.root / "data", self.root / "log", self.root / "run", self.run_dir / "exec"):
                d.mkdir(parents=True, exist_ok=True)
            self.socket.unlink(missing_ok=True)
            argv = [
                shutil.which("dockerd", path="/usr/sbin:/usr/bin") or "dockerd",
                f"--data-root={self.root / 'data'}",
                f"--exec-root={self.run_dir / 'exec'}",
                f"--host=unix://{self.socket}",
                f"--pidfile={self.root / 'docker.pid'}",
                "--iptables=false",
                "--ip6tables=false",
                "--bridge=none",
            ]
            d = daemons.start(argv, self.root / "log" / "dockerd.log")
            self._record().write_text(json.dumps(vars(d)))
            if not wait(lambda: self.ready() or not d.alive(), timeout_s, "dockerd to answer", fail=False):
                self.down()
                raise ConfigError(f"dockerd did not answer in {timeout_s:.0f} s: {self.log_tail()}")
            if not d.alive():
                tail = self.log_tail()
                self.down()  # what it mounted before it gave up
                raise ConfigError(f"dockerd exited: {tail}")
        self.import_rootfs()

    def import_rootfs(self) -> list[str]:
        """Each set-up root filesystem as `polar-<name>:local`, imported again only when its folder changed."""
        done = []
        for folder in sorted(p for p in ROOTFS.glob("*") if (p / "bin" / "sh").exists()):
            name, stamp = image_name(folder.name), _stamp(folder)
            have = self.client("image", "inspect", "--format", f'{{{{index .Config.Labels "{STAMP_LABEL}"}}}}', name)
            if have.returncode == 0 and have.stdout.decode().strip() == stamp:
                continue
            self.import_folder(folder, name, stamp)
            done.append(name)
        return done

    def import_folder(self, folder: Path, name: str, stamp: str, timeout: float = 600) -> None:
        """`tar` of `folder` piped into `docker import`, named `name` (labelled with `stamp`) only once both succeeded.
        The image is imported without a name and tagged after: a tar that failed part way (an unreadable file, a
        folder changing under it) ends its archive early or leaves files out, and what docker made of it is removed,
        never named, since the label would keep it as current."""
        cli = _client() or "docker"
        tar, imported = pipe(
            ["tar", "-C", str(folder), "-c", "."],
            [cli, "import", "--change", f"LABEL {STAMP_LABEL}={stamp}", "-"],
            env=os.environ | self.env,
            timeout=timeout,
        )
        image = imported.stdout.decode().strip()
        if imported.returncode == 0 and tar.returncode == 0:
            tagged = self.client("tag", image, name)
            if tagged.returncode == 0:
                return
            why = f"tagging {image}: {tagged.stderr.decode()[-1000:]}"
        elif tar.returncode != 0:
            why = f"tar exited {tar.returncode}: {tar.stderr.decode(errors='replace').strip()[-1000:]}"
        else:
            why = f"docker import exited {imported.returncode}: {imported.stderr.decode(errors='replace')[-1000:]}"
        if image.startswith("sha256:"):
            self.client("rmi", image)
        raise ConfigError(f"importing {folder} as {name} failed: {why}")

    def tag(self, names: dict[str, str]) -> None:
        """Each `name` as another name for an image the engine has ({"debian:bookworm-slim": "polar-bookworm:local"}):
        where no registry is reached, what a Dockerfile starts FROM is a local image the user maps."""
        for name, local in names.items():
            done = self.client("tag", local, name)
            if done.returncode != 0:
                raise ConfigError(f"tagging {local} as {name}: {done.stderr.decode().strip()[-300:]}")

    def containers(self) -> list[str]:
        if not self.ready():
            return []
        out = self.client("ps", "-aq")
        return out.stdout.decode().split()

    def down(self) -> list[str]:
        """Remove its containers, stop dockerd, check that nothing it mounted is left; returns what was stopped."""
        stopped = []
        d = self.daemon()
        if d is not None and d.alive():
            running = self.containers()
            if running:
                self.client("rm", "-f", *running, timeout=120)
                stopped += [f"container {c}" for c in running]
            daemons.stop([d], self.grace_s)
            stopped.append(f"dockerd {d.pid}")
        left = self.mounts()
        for target in sorted(left, key=len, reverse=True):  # what a killed engine left: deepest first
            subprocess.run(["umount", "-l", target], capture_output=True, check=False)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self._record().unlink(missing_ok=True)
        return stopped

    def mounts(self) -> list[str]:
        """Mount points under the engine's folders (none once it stopped cleanly)."""
        prefixes = (str(self.root) + "/", str(self.run_dir) + "/")
        return [
            line.split()[4]
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(prefixes)
        ]

    def log_tail(self, lines: int = 8) -> str:
        try:
            return " | ".join((self.root / "log" / "dockerd.log").read_text().splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def pipe(
    producer: list[str], consumer: list[str], env: dict[str, str] | None = None, timeout: float = 600
) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """`producer | consumer`, both waited for: (the producer with its stderr, the consumer with its stdout and stderr).
    The parent closes its copy of the pipe once the consumer holds it, so a consumer that stops reading ends the
    producer (SIGPIPE) instead of leaving it blocked on a full pipe; the producer's stderr goes to a file, which it
    cannot block on while the consumer is read. A consumer out of time is killed with the producer: exit status 124."""
    with tempfile.TemporaryFile() as errors:
        first = subprocess.Popen(producer, stdout=subprocess.PIPE, stderr=errors, env=env)
        try:
            with first.stdout:  # type: ignore[union-attr]
                second = subprocess.Popen(
                    consumer, stdin=first.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
                )
            try:
                out, err = second.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                first.kill()
                second.kill()
                out, err = second.communicate()
                second.returncode, err = 124, err + f"no end in {timeout:.0f} s".encode()
            except BaseException:
                first.kill()
                second.kill()
                second.wait()
                raise
        finally:
            try:  # the consumer is gone: the producer ends with its output read, or at its next write
                first.wait(timeout=30)
            except subprocess.TimeoutExpired:
                first.kill()
                first.wait()
        errors.seek(0)
        return (
            subprocess.CompletedProcess(producer, first.returncode, None, errors.read()),
            subprocess.CompletedProcess(consumer, second.returncode, out, err),
        )


def _stamp(folder: Path) -> str:
    """What identifies a root filesystem's content: the set-up's stamp for it, else the folder's own mtime."""
    stamp = DEPS / "rootfs.stamp"
    if folder.parent == ROOTFS and stamp.exists():
        return stamp.read_text().split()[0][:16] + "-" + folder.name
    return f"{int(folder.stat().st_mtime)}-{folder.name}"
