"""A real Slurm cluster on this machine, to try `polar launch slurm` on and to test it with (`polar cluster slurm`).

Debian's Slurm and munge (`scripts/setup.sh slurm`) run as root without systemd, every file under one folder:
`etc/` (slurm.conf, cgroup.conf, gres.conf, plugstack.conf), `munge/` (its key), `state/` (the controller's, kept
across restarts so job ids never repeat: a repeated id would find an older job's ray.sub files), `spool/`, `log/`,
`dev/` (fake GPU device files) and `run/daemons.json`; only munged's socket lives apart, in a short folder of the
temp dir named after the root (munged wants every folder above it searchable by all). Clients find the cluster
through `SLURM_CONF=<root>/etc/slurm.conf`; the ports (16817, 16818) sit outside ray.sub's plan.

- One node, named after this machine (or `node`), at 127.0.0.1, with `gpus` fake GPUs: GPU GRES needs device files, and
  char devices aliasing /dev/null pass (regular files are refused). `gpus=0`: a cluster without GRES.
- `nodes=2` (or more): nodes `n1`, `n2`, ... (`node` is then their prefix), each slurmd in its own network, UTS, PID
  and mount namespaces on a bridge inside this machine (netns.py), at NodeAddr 10.233.X.11, .12, ...; slurmctld on
  the bridge's .1. Their /etc/hosts (`etc/hosts`) names every node, their /tmp/ray is `nodes/<name>/ray`, their
  pmix folders `tmp/<name>`. `run/net.json` records the bridge, the links and each node's namespaces.
- Our SPANK plugin (`spank/polar_container.c`, built by set-up) takes the pyxis options ray.sub passes.
- `proctrack/cgroup` on the cgroup v1 freezer: under `proctrack/linuxproc` Ray's daemons outlive their job.
- Stopping: the cluster's jobs are cancelled, then each daemon recorded at start gets SIGTERM (SIGKILL after
  `grace_s`), and only while /proc still names the same process (its name and start time): a pid is never
  taken from a pid file a daemon wrote, and a node's processes are known by the pids the host saw them start
  with (`unshare`, the node's pid 1, its slurmd), never by one read inside its pid namespace. A node's pid 1
  ending ends its namespaces and its veth; then the bridge goes, and the freezer folders slurmd made.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import daemons
from ..daemons import Daemon, proc_stat, wait
from ..errors import ConfigError
from ..paths import DEPS
from . import netns

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


class SlurmTestCluster:
    def __init__(
        self,
        root: str | Path,
        *,
        gpus: int = 8,
        mode: str = "host",
        ports: tuple[int, int] = PORTS,
        node: str | None = None,
        nodes: int = 1,
        grace_s: float = 10.0,
    ):
        if mode not in ("host", "chroot"):
            raise ConfigError(f"mode={mode}: host or chroot")
        if not 1 <= nodes <= 50:
            raise ConfigError(f"nodes={nodes}: 1 to 50")
        self.root, self.gpus, self.mode, self.grace_s = Path(root).resolve(), gpus, mode, grace_s
        self.ports = ports
        self.hostname = socket.gethostname().split(".")[0]
        self.node = node or self.hostname  # another name for a second cluster beside the first (its own cgroups)
        # several nodes: named <prefix>1, <prefix>2, ... (`hostname | tr -dc 0-9` is ray.sub's rank guess)
        self.names = [self.node] if nodes == 1 else [f"{node or 'n'}{i}" for i in range(1, nodes + 1)]
        self.conf = self.root / "etc" / "slurm.conf"
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:12]
        self.socket_dir = Path(tempfile.gettempdir()) / f"polar-munge-{digest}"
        self.bridge = f"polar-{digest[:6]}"  # links: polar-<digest>-<i>; at most 15 characters
        self._seed = int(digest, 16)
        self._subnet: ipaddress.IPv4Network | None = None  # several nodes: the bridge's, chosen at `up`

    @property
    def env(self) -> dict[str, str]:
        """What a Slurm client needs to find this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def launch_env(self) -> dict[str, str]:
        """What `polar launch slurm` needs on this cluster beyond a Slurm client's settings, so that nothing is
        set by hand (`up` writes it to `env.sh`): `polar` and Ray's CLI on PATH (ray.sub runs `ray`; NeMo-RL's
        environment has it), NeMo-RL where it is found, Ray's token auth off (a `~/.ray/auth_token` left by an
        earlier Ray makes ray.sub's head want a token its own `ray status` does not send, and the job waits
        forever), and, in host mode, a sidecar image name (recorded by our SPANK plugin, not used)."""
        from ..nemo_rl import NemoRLNotFound, locate

        env = self.env | {"RAY_AUTH_MODE": "disabled"}
        path = [str(Path(sys.executable).parent)]
        try:
            found = locate()
        except NemoRLNotFound:
            found = None
        if found is not None:
            env |= {"NEMO_RL_DIR": str(found.dir), "NEMO_RL_PYTHON": str(found.python)}
            path.append(str(found.python.parent))
        env["PATH"] = os.pathsep.join([*dict.fromkeys(path), os.environ.get("PATH", "")])
        if self.mode == "host":
            env["POLAR_CONTAINER"] = os.environ.get("POLAR_CONTAINER", "nemo-polar:local")
        return env

    def _write_launch_env(self) -> Path:
        script = self.root / "env.sh"
        lines = ["# polar cluster slurm: what `polar launch slurm` needs here (source this file)"]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in self.launch_env().items()]
        script.write_text("\n".join(lines) + "\n")
        return script

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
        several = len(self.names) > 1
        lines = [
            "ClusterName=polar",
            f"SlurmctldHost={self.hostname}({self._address(0) if several else '127.0.0.1'})",
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
            f"TmpFS={r / 'tmp' / '%n' if several else r / 'tmp'}",  # the pmix plugin's client folders
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
        ]
        for i, name in enumerate(self.names, 1):
            host, addr = (name, self._address(i)) if several else (self.hostname, "127.0.0.1")
            lines.append(
                f"NodeName={name} NodeHostname={host} NodeAddr={addr} CPUs={os.cpu_count()} "
                f"RealMemory={memory}{gres} State=UNKNOWN"
            )
        lines.append(f"PartitionName=batch Nodes={','.join(self.names)} Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        (r / "etc" / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
        devices = []
        for i in range(self.gpus):
            dev = r / "dev" / f"nvidia{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
            devices.append(str(dev))
        gres_conf = "".join(
            f"NodeName={name} Name=gpu File={r / 'dev'}/nvidia[0-{self.gpus - 1}]\n" for name in self.names
        )
        (r / "etc" / "gres.conf").write_text("AutoDetect=off\n" + (gres_conf if self.gpus else ""))
        plug = f"required {PLUGIN} mode={self.mode} log={r / 'log/polar_container.log'}\n"
        (r / "etc" / "plugstack.conf").write_text(plug)

    # -- daemons ------------------------------------------------------------------------------------------
    def _record(self) -> Path:
        return self.root / "run" / "daemons.json"

    def _net_record(self) -> Path:
        return self.root / "run" / "net.json"

    def daemons(self) -> list[Daemon]:
        try:
            return [Daemon(**d) for d in json.loads(self._record().read_text())]
        except FileNotFoundError:
            return []

    def network(self) -> dict:
        """What `up` made for several nodes (bridge, links, subnet, each node's namespaces); {} for one node."""
        try:
            return json.loads(self._net_record().read_text())
        except FileNotFoundError:
            return {}

    def _add(self, d: Daemon) -> Daemon:
        self._record().write_text(json.dumps([vars(x) for x in self.daemons() + [d]]))
        return d

    def _start(self, name: str, argv: list[str], node: str = "") -> Daemon:
        return self._add(daemons.start(argv, self.root / "log" / f"{name}{'-' + node if node else ''}.out", node))

    def _child(self, parent: Daemon, name: str, timeout_s: float = 15.0) -> Daemon:
        """`parent`'s child named `name` (once it has exec'd), as this machine's /proc knows it: its host pid."""
        found: list[Daemon] = []

        def look() -> bool:
            for proc in Path("/proc").glob("[0-9]*"):
                st = proc_stat(int(proc.name))
                if st and st[2] == parent.pid and st[0] == name[:15]:
                    found.append(Daemon(st[0], int(proc.name), st[3], parent.node))
                    return True
            return not parent.alive()

        wait(look, timeout_s, f"{name} under {parent.name} {parent.pid} on {parent.node}", fail=False)
        if not found:
            raise ConfigError(f"node {parent.node}: no {name} started ({self.log_tail()})")
        return self._add(found[0])

    def _address(self, i: int) -> str:
        """The bridge's address (i=0: the controller's) or node i's."""
        return str(self._subnet[1 if i == 0 else 10 + i])

    def _start_nodes(self) -> None:
        """Several nodes: the bridge, then each node's namespaces with its veth and slurmd (see netns.py)."""
        r = self.root
        hosts = [f"127.0.0.1 localhost\n{self._address(0)} {self.hostname}\n"]
        hosts += [f"{self._address(i)} {name}\n" for i, name in enumerate(self.names, 1)]
        (r / "etc" / "hosts").write_text("".join(hosts))
        script = r / "run" / "node.sh"
        script.write_text(netns.NODE_SCRIPT)
        links = [f"{self.bridge}-{i}" for i in range(1, len(self.names) + 1)]
        tmp_ray = Path("/tmp/ray")
        net = {"bridge": self.bridge, "subnet": str(self._subnet), "links": links, "nodes": {}}
        net["made_tmp_ray"] = not tmp_ray.exists()  # a node binds its own folder over it: the mount point must be
        tmp_ray.mkdir(exist_ok=True)
        self._net_record().write_text(json.dumps(net))  # before anything is made: down() undoes what it names
        netns.make_bridge(self.bridge, f"{self._address(0)}/{self._subnet.prefixlen}")
        for i, (name, link) in enumerate(zip(self.names, links, strict=True), 1):
            for d in (r / "nodes" / name / "ray", r / "tmp" / name):
                d.mkdir(parents=True, exist_ok=True)
            slurmd = ["/usr/sbin/slurmd", "-D", "-f", str(self.conf), "-N", name]
            address = f"{self._address(i)}/{self._subnet.prefixlen}"
            argv = netns.node_argv(script, name, address, r / "etc" / "hosts", r / "nodes" / name / "ray", slurmd)
            outer = self._start("unshare", argv, node=name)
            init = self._child(outer, "bash")  # the node's pid 1
            net["nodes"][name] = netns.namespace_ids(init.pid)
            self._net_record().write_text(json.dumps(net))
            netns.plug(self.bridge, link, init.pid)
            self._child(init, "slurmd")

    def up(self, timeout_s: float = 30.0) -> Path:
        """Start munged, slurmctld and the slurmds; return when every node is idle, with the script that sets what a
        launch needs here (`launch_env`). A running cluster is left as it is."""
        why = missing() or (netns.missing() if len(self.names) > 1 else None)
        if why:
            raise ConfigError(f"cannot start a Slurm cluster here: {why}")
        if any(d.alive() for d in self.daemons()):
            if self.ready():
                return self._write_launch_env()
            raise ConfigError(f"{self.root}: a cluster's daemons run but its nodes are not idle ({self.log_tail()})")
        if self.network():
            self.down()  # what a crashed cluster left
        self._record().unlink(missing_ok=True)
        several = len(self.names) > 1
        self._subnet = netns.free_subnet(self._seed) if several else None
        self._write_config()
        m, sock = self.root / "munge", self.socket_dir / "munge.socket"
        munged = self._start(
            "munged",
            ["/usr/sbin/munged", "--foreground", f"--socket={sock}", f"--key-file={m / 'munge.key'}",
             f"--pid-file={self.root / 'run/munged.pid'}", f"--seed-file={m / 'seed'}",
             f"--log-file={self.root / 'log/munged.log'}"],
        )  # fmt: skip
        if (
            not wait(lambda: sock.exists() or not munged.alive(), 10, "munged's socket", fail=False)
            or not sock.exists()
        ):
            tail = self.log_tail()
            self.down()
            raise ConfigError(f"munged did not start: {tail}")
        try:
            self._start("slurmctld", ["/usr/sbin/slurmctld", "-D", "-f", str(self.conf)])
            if several:
                self._start_nodes()
            else:
                self._start("slurmd", ["/usr/sbin/slurmd", "-D", "-f", str(self.conf), "-N", self.node])
            wait(self.ready, timeout_s, "the nodes to be idle")
        except ConfigError as exc:
            tail = self.log_tail()
            self.down()
            raise ConfigError(f"the Slurm test cluster did not come up: {exc}; {tail}") from None
        return self._write_launch_env()

    def ready(self) -> bool:
        out = self.client("sinfo", "-h", "-N", "-o", "%T", timeout=10)
        return out.returncode == 0 and out.stdout.split() == ["idle"] * len(self.names)

    def log_tail(self, lines: int = 5) -> str:
        tails = []
        names = ["slurmctld.log"] + [f"slurmd-{n}.log" for n in self.names] + ["munged.out"]
        names += [f"unshare-{n}.out" for n in self.names if len(self.names) > 1]
        for name in names:
            path = self.root / "log" / name
            if path.exists():
                tails.append(f"{name}: " + " | ".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "; ".join(tails) or "no logs"

    def jobs(self) -> list[str]:
        out = self.client("squeue", "-h", "-o", "%i", timeout=10)
        return out.stdout.split() if out.returncode == 0 else []

    def _stop(self, live: list[Daemon]) -> None:
        daemons.stop(live, self.grace_s)

    def lose(self, name: str) -> list[str]:
        """Node `name` gone at once, as a machine that loses its power: its pid 1 killed, and with it every process
        of its namespaces (slurmd, the job's steps, all they started). Only for several nodes; what was killed."""
        inits = [d for d in self.daemons() if d.node == name and d.name not in ("unshare", "slurmd") and d.alive()]
        if len(self.names) < 2 or not inits:
            raise ConfigError(f"no running node {name} of several here (nodes: {', '.join(self.names)})")
        for d in inits:
            d.signal(signal.SIGKILL)  # the pid namespace ends with its pid 1
        wait(lambda: not any(d.alive() for d in inits), 10, f"node {name} to go")
        return [f"{d.name} {d.pid} ({d.node})" for d in inits]

    def down(self) -> list[str]:
        """Cancel the jobs, stop the recorded daemons (slurmds, then each node's pid 1 and unshare, then the
        controller and munged), remove the links, the bridge and slurmd's freezer folders. Returns what was
        stopped."""
        daemons, net = self.daemons(), self.network()
        if any(d.name == "slurmctld" and d.alive() for d in daemons) and self.jobs():
            self.client("scancel", *self.jobs(), timeout=10)
            wait(lambda: not self.jobs(), 30 + self.grace_s, "the jobs to end", fail=False)
        stopped = []
        nodes = [d for d in daemons if d.node and d.name != "slurmd"]
        groups = [
            [d for d in daemons if d.name == "slurmd"],
            [d for d in nodes if d.name != "unshare"],  # a node's pid 1 ends when its slurmd has
            [d for d in nodes if d.name == "unshare"],
            [d for d in daemons if d.name == "slurmctld"],  # the controller outlives its nodes' last word
            [d for d in daemons if d.name == "munged"],
        ]
        for group in groups:
            live = [d for d in group if d.alive()]
            self._stop(live)
            stopped += [f"{d.name} {d.pid}" + (f" ({d.node})" if d.node else "") for d in live]
        if net:
            wait(lambda: not any(netns.link_exists(x) for x in net["links"]), 10, "", fail=False)
            for link in net["links"] + [net["bridge"]]:  # a veth goes with its namespace; the bridge is ours to end
                if netns.delete_link(link):
                    stopped.append(f"link {link}")
            if net.get("made_tmp_ray"):
                try:
                    Path("/tmp/ray").rmdir()
                except OSError:
                    pass  # something of this machine's own Ray is in it now
            self._net_record().unlink()
        self._record().unlink(missing_ok=True)
        shutil.rmtree(self.socket_dir, ignore_errors=True)
        # only the nodes this cluster recorded: another cluster's slurmd may use this machine's name
        nodes_made = (set(net.get("nodes", {})) | {d.node for d in daemons if d.node}) if net else {self.node}
        for name in nodes_made:
            _remove_freezer(FREEZER / f"slurm_{name}")
        return stopped


def _real_memory_mb() -> int:
    out = subprocess.run(["/usr/sbin/slurmd", "-C"], capture_output=True, text=True, check=False).stdout
    for word in out.split():
        if word.startswith("RealMemory="):
            return int(int(word.split("=")[1]) * 0.9)
    return 1024


def _remove_freezer(top: Path) -> None:
    """slurmd's freezer folders, deepest first; only empty ones can go (rmdir), so no live task is touched."""
    if not top.is_dir():
        return
    for folder in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [top]:
        try:
            folder.rmdir()
        except OSError:
            pass
