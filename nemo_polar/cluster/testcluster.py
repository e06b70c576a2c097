"""A real Slurm cluster on this machine, to try `polar launch slurm` on and to test it with (`polar cluster slurm`).

Debian's Slurm and munge (`scripts/setup.sh slurm`) run as root without systemd, every file under one folder:
`etc/` (slurm.conf, cgroup.conf, gres.conf, plugstack.conf), `munge/` (its key), `state/` (the controller's, kept
across restarts so job ids never repeat: a repeated id would find an older job's ray.sub files), `spool/`, `log/`,
`dev/` (fake GPU device files) and `run/daemons.json`; only munged's socket lives apart, in a short folder of the
temp dir named after the root (munged wants every folder above it searchable by all). Clients find the cluster
through `SLURM_CONF=<root>/etc/slurm.conf`; the ports (16817, 16818) sit outside ray.sub's plan.

- One node, named after this machine (or `node`), at 127.0.0.1, with `gpus` fake GPUs: GPU GRES needs device files, and
  char devices aliasing /dev/null pass (regular files are refused). `gpus=0`: a cluster without GRES.
- Our SPANK plugin (`spank/polar_container.c`, built by set-up) takes the pyxis options ray.sub passes.
- `proctrack/cgroup` on the cgroup v1 freezer: under `proctrack/linuxproc` Ray's daemons outlive their job.
- Stopping: the cluster's jobs are cancelled, then each daemon recorded at start gets SIGTERM (SIGKILL after
  `grace_s`), and only while /proc still names the same process (its name and start time): a pid is never
  taken from a pid file a daemon wrote. The freezer folders slurmd made are removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..local.vllm_server import DEPS

PLUGIN = DEPS / "slurm" / "polar_container.so"
PORTS = (16817, 16818)  # slurmctld, slurmd
FREEZER = Path("/sys/fs/cgroup/freezer")
DAEMONS = ("munged", "slurmctld", "slurmd")


def missing() -> str | None:
    """Why this machine cannot run the cluster, or None."""
    if os.geteuid() != 0:
        return "the test Slurm cluster runs its daemons as root"
    absent = [d for d in DAEMONS if not shutil.which(d, path="/usr/sbin:/usr/bin:" + os.environ.get("PATH", ""))]
    if absent:
        return f"{', '.join(absent)} not installed (scripts/setup.sh slurm)"
    if not PLUGIN.is_file():
        return f"no SPANK plugin at {PLUGIN} (scripts/setup.sh slurm builds it)"
    if not (FREEZER / "cgroup.procs").exists():
        return "no cgroup v1 freezer: Slurm 22.05's proctrack/cgroup needs it (linuxproc lets Ray outlive jobs)"
    return None


def _proc_identity(pid: int) -> tuple[str, str] | None:
    """(name, start time in clock ticks) of a live process, from /proc/<pid>/stat; None if there is none (or
    only its zombie, reaped here where it is our child)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name, fields = raw[raw.index("(") + 1 : raw.rindex(")")], raw[raw.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        return None
    return name, fields[19]


@dataclass
class Daemon:
    name: str
    pid: int
    start: str  # /proc start time: with the name, what tells this process from a later one with its pid

    def alive(self) -> bool:
        return _proc_identity(self.pid) == (self.name[:15], self.start)

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)


class SlurmTestCluster:
    def __init__(
        self,
        root: str | Path,
        *,
        gpus: int = 8,
        mode: str = "host",
        ports: tuple[int, int] = PORTS,
        node: str | None = None,
        grace_s: float = 10.0,
    ):
        if mode not in ("host", "chroot"):
            raise ConfigError(f"mode={mode}: host or chroot")
        self.root, self.gpus, self.mode, self.grace_s = Path(root).resolve(), gpus, mode, grace_s
        self.ports = ports
        self.hostname = socket.gethostname().split(".")[0]
        self.node = node or self.hostname  # another name for a second cluster beside the first (its own cgroups)
        self.conf = self.root / "etc" / "slurm.conf"
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:12]
        self.socket_dir = Path(tempfile.gettempdir()) / f"polar-munge-{digest}"

    @property
    def env(self) -> dict[str, str]:
        """What a Slurm client needs to find this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def client(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(
            argv, env=os.environ | self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    # -- files --------------------------------------------------------------------------------------------
    def _write_config(self) -> None:
        r = self.root
        for d in ("etc", "munge", "state", "spool", "log", "run", "tmp", "dev"):
            (r / d).mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(mode=0o755, exist_ok=True)
        self.socket_dir.chmod(0o755)
        key = r / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(128))
            key.chmod(0o600)
        memory = _real_memory_mb()
        gres = f" Gres=gpu:{self.gpus}" if self.gpus else ""
        lines = [
            "ClusterName=polar",
            f"SlurmctldHost={self.hostname}(127.0.0.1)",
            f"SlurmctldPort={self.ports[0]}",
            f"SlurmdPort={self.ports[1]}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.socket_dir / 'munge.socket'}",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool' / '%n'}",
            f"SlurmctldPidFile={r / 'run/slurmctld.pid'}",
            f"SlurmdPidFile={r / 'run/slurmd-%n.pid'}",
            f"SlurmctldLogFile={r / 'log/slurmctld.log'}",
            f"SlurmdLogFile={r / 'log/slurmd-%n.log'}",
            f"TmpFS={r / 'tmp'}",  # the pmix plugin's client folders
            f"PlugStackConfig={r / 'etc/plugstack.conf'}",
            "ProctrackType=proctrack/cgroup",
            "TaskPlugin=task/none",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres",
            "MpiDefault=none",
            "ReturnToService=2",
            "KillWait=5",
            "GresTypes=gpu",
            f"NodeName={self.node} NodeHostname={self.hostname} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} "
            f"RealMemory={memory}{gres} State=UNKNOWN",
            f"PartitionName=batch Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        (r / "etc" / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
        devices = []
        for i in range(self.gpus):
            dev = r / "dev" / f"nvidia{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
            devices.append(str(dev))
        gres_conf = f"NodeName={self.node} Name=gpu File={r / 'dev'}/nvidia[0-{self.gpus - 1}]\n" if self.gpus else ""
        (r / "etc" / "gres.conf").write_text("AutoDetect=off\n" + gres_conf)
        plug = f"required {PLUGIN} mode={self.mode} log={r / 'log/polar_container.log'}\n"
        (r / "etc" / "plugstack.conf").write_text(plug)

    # -- daemons ------------------------------------------------------------------------------------------
    def _record(self) -> Path:
        return self.root / "run" / "daemons.json"

    def daemons(self) -> list[Daemon]:
        try:
            return [Daemon(**d) for d in json.loads(self._record().read_text())]
        except FileNotFoundError:
            return []

    def _start(self, name: str, argv: list[str]) -> Daemon:
        log = open(self.root / "log" / f"{name}.out", "ab")  # noqa: SIM115 (the daemon's, closed below)
        try:
            p = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        for _ in range(100):
            ident = _proc_identity(p.pid)
            if ident:
                break
            time.sleep(0.01)
        d = Daemon(Path(argv[0]).name, p.pid, ident[1] if ident else "")
        self._record().write_text(json.dumps([vars(x) for x in self.daemons() + [d]]))
        return d

    def up(self, timeout_s: float = 30.0) -> None:
        """Start munged, slurmctld and slurmd; return when the node is idle. A running cluster is left as it is."""
        why = missing()
        if why:
            raise ConfigError(f"cannot start a Slurm cluster here: {why}")
        if any(d.alive() for d in self.daemons()):
            if self.ready():
                return
            raise ConfigError(f"{self.root}: a cluster's daemons run but its node is not idle ({self.log_tail()})")
        self._record().unlink(missing_ok=True)
        self._write_config()
        m, sock = self.root / "munge", self.socket_dir / "munge.socket"
        munged = self._start(
            "munged",
            ["/usr/sbin/munged", "--foreground", f"--socket={sock}", f"--key-file={m / 'munge.key'}",
             f"--pid-file={self.root / 'run/munged.pid'}", f"--seed-file={m / 'seed'}",
             f"--log-file={self.root / 'log/munged.log'}"],
        )  # fmt: skip
        if (
            not _wait(lambda: sock.exists() or not munged.alive(), 10, "munged's socket", fail=False)
            or not sock.exists()
        ):
            tail = self.log_tail()
            self.down()
            raise ConfigError(f"munged did not start: {tail}")
        self._start("slurmctld", ["/usr/sbin/slurmctld", "-D", "-f", str(self.conf)])
        self._start("slurmd", ["/usr/sbin/slurmd", "-D", "-f", str(self.conf), "-N", self.node])
        try:
            _wait(self.ready, timeout_s, "the node to be idle")
        except ConfigError:
            tail = self.log_tail()
            self.down()
            raise ConfigError(f"the Slurm test cluster did not come up: {tail}") from None

    def ready(self) -> bool:
        out = self.client("sinfo", "-h", "-N", "-o", "%T", timeout=10)
        return out.returncode == 0 and out.stdout.split() == ["idle"]

    def log_tail(self, lines: int = 5) -> str:
        tails = []
        for name in ("slurmctld.log", f"slurmd-{self.node}.log", "munged.out"):
            path = self.root / "log" / name
            if path.exists():
                tails.append(f"{name}: " + " | ".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "; ".join(tails) or "no logs"

    def jobs(self) -> list[str]:
        out = self.client("squeue", "-h", "-o", "%i", timeout=10)
        return out.stdout.split() if out.returncode == 0 else []

    def down(self) -> list[str]:
        """Cancel the jobs, stop the recorded daemons, remove slurmd's freezer folders. Returns what was stopped."""
        daemons = self.daemons()
        if any(d.name == "slurmctld" and d.alive() for d in daemons) and self.jobs():
            self.client("scancel", *self.jobs(), timeout=10)
            _wait(lambda: not self.jobs(), 30 + self.grace_s, "the jobs to end", fail=False)
        stopped = []
        for group in (("slurmd",), ("slurmctld",), ("munged",)):  # the controller outlives its nodes' last word
            live = [d for d in daemons if d.name in group and d.alive()]
            for d in live:
                d.signal(signal.SIGTERM)
            if not _wait(lambda live=live: not any(d.alive() for d in live), self.grace_s, "", fail=False):
                for d in live:
                    d.signal(signal.SIGKILL)
                _wait(lambda live=live: not any(d.alive() for d in live), 5, "", fail=False)
            stopped += [f"{d.name} {d.pid}" for d in live]
        self._record().unlink(missing_ok=True)
        shutil.rmtree(self.socket_dir, ignore_errors=True)
        _remove_freezer(FREEZER / f"slurm_{self.node}")
        return stopped


def _real_memory_mb() -> int:
    out = subprocess.run(["/usr/sbin/slurmd", "-C"], capture_output=True, text=True, check=False).stdout
    for word in out.split():
        if word.startswith("RealMemory="):
            return int(int(word.split("=")[1]) * 0.9)
    return 1024


def _wait(ok, timeout_s: float, what: str, fail: bool = True) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ok():
            return True
        time.sleep(0.2)
    if fail:
        raise ConfigError(f"timed out after {timeout_s:.0f} s waiting for {what}")
    return False


def _remove_freezer(top: Path) -> None:
    """slurmd's freezer folders, deepest first; only empty ones can go (rmdir), so no live task is touched."""
    if not top.is_dir():
        return
    for folder in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [top]:
        try:
            folder.rmdir()
        except OSError:
            pass
