"""The nodes of a several-node test cluster (testcluster.py): each slurmd in its own network, UTS, PID and mount
namespaces, on a bridge that exists only inside this machine.

Several slurmd on one network are not enough for ray.sub: its worker runs `ray stop` (every Ray process the node
can see, the head's included) and `rm -rf /tmp/ray/session_*`, and every node's gateway binds the same port. So a
node is `unshare --net --uts --pid --mount --fork --mount-proc` running NODE_SCRIPT as its pid 1: it waits for the
`eth0` the host moves in (one end of a veth pair whose other end is on the bridge), takes its address, its name and
its own /etc/hosts and /tmp/ray (bind mounts private to its mount namespace), then runs slurmd and reaps what
Ray's daemons leave. The bridge holds the controller's address (slurmctld listens in the host's namespace; munged's
socket is a file, reached through the shared filesystem); no node has a default route and the host forwards
nothing, so the nodes reach only each other and the controller.

Nothing here uses `ip netns` (its bind mounts under /run/netns would outlive a crash, and `ip netns exec` remounts
/sys, hiding the cgroup v1 freezer proctrack/cgroup needs): a node's namespaces live as long as its processes, so
killing its pid 1 (from the host, by the pid the host saw it start with) ends everything in it, and its veth with
it. Names derive from the cluster's folder, so two clusters never share a bridge or a link.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from pathlib import Path

from ..errors import ConfigError

TOOLS = ("unshare", "ip", "mount", "hostname")
BASE = ipaddress.ip_network("10.233.0.0/16")  # where the bridge's /24 is chosen: one unused on this machine

# pid 1 of a node. Arguments: its name, its address/prefix, its /etc/hosts, its /tmp/ray folder, then slurmd's argv.
NODE_SCRIPT = r"""#!/bin/bash
set -eu
name=$1 addr=$2 hosts=$3 ray=$4
shift 4
for _ in $(seq 200); do ip link show eth0 >/dev/null 2>&1 && break; sleep 0.05; done
ip link set lo up
ip addr add "$addr" dev eth0
ip link set eth0 up
hostname "$name"
mount --bind "$hosts" /etc/hosts
mount --bind "$ray" /tmp/ray
"$@" &
child=$!
trap 'kill -TERM $child 2>/dev/null || true' TERM INT
# wait returns on each signal and on each child's end; orphans reparented here (Ray's daemons) are reaped too
while kill -0 "$child" 2>/dev/null; do wait || true; done
"""


def missing() -> str | None:
    """Why this machine cannot make the nodes' namespaces, or None."""
    absent = [t for t in TOOLS if not shutil.which(t)]
    if absent:
        return f"{', '.join(absent)} not installed (scripts/setup.sh slurm installs iproute2)"
    try:
        done = subprocess.run(
            ["unshare", "--net", "--uts", "--pid", "--mount", "--fork", "--mount-proc", "true"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return "unshare of network, UTS, PID and mount namespaces did not return"
    if done.returncode:
        return f"cannot make network, UTS, PID and mount namespaces: {done.stderr.strip()}"
    return None


def ip(*argv: str) -> None:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=10, check=False)
    if done.returncode:
        raise ConfigError(f"ip {' '.join(argv)}: {done.stderr.strip()}")


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def delete_link(name: str) -> bool:
    """Delete one of our links if it is there; True if it was."""
    if not link_exists(name):
        return False
    subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=10, check=False)
    return True


def free_subnet(seed: int) -> ipaddress.IPv4Network:
    """A /24 of BASE that no address of this machine's network namespace falls in, the search starting at `seed`."""
    out = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, timeout=10, check=False).stdout
    used = [ipaddress.ip_interface(w).network for line in out.splitlines() for w in line.split()[3:4]]
    nets = list(BASE.subnets(new_prefix=24))
    for i in range(len(nets)):
        net = nets[(seed + i) % len(nets)]
        if not any(net.overlaps(u) for u in used):
            return net
    raise ConfigError(f"no free /24 in {BASE} for the test cluster's bridge")


def make_bridge(name: str, address: str) -> None:
    """The bridge, its address (the controller's), up; IPv6 off so it says nothing on its own."""
    ip("link", "add", name, "type", "bridge")
    v6 = Path(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6")
    if v6.exists():
        v6.write_text("1\n")
    ip("addr", "add", address, "dev", name)
    ip("link", "set", name, "up")


def plug(bridge: str, link: str, pid: int) -> None:
    """A veth pair: `link` on the bridge, its peer `eth0` in the network namespace of process `pid`."""
    ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", str(pid))
    ip("link", "set", link, "master", bridge, "up")


def node_argv(script: Path, name: str, address: str, hosts: Path, ray: Path, slurmd: list[str]) -> list[str]:
    namespaces = ["unshare", "--net", "--uts", "--pid", "--mount", "--fork", "--mount-proc", "--propagation=private"]
    return namespaces + ["/bin/bash", str(script), name, address, str(hosts), str(ray)] + slurmd


def namespace_ids(pid: int) -> dict[str, str]:
    """The namespaces process `pid` lives in, as the kernel names them (`net:[4026532301]`)."""
    out = {}
    for kind in ("net", "uts", "pid", "mnt"):
        try:
            out[kind] = str(Path(f"/proc/{pid}/ns/{kind}").readlink())
        except OSError:
            pass
    return out


def processes_in(namespaces: set[str]) -> list[int]:
    """Every process of this machine living in one of these namespaces (ids as namespace_ids gives them). An id
    names a namespace only while it lives: the kernel gives it to a later one."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        for kind in ("net", "uts", "pid", "mnt"):
            try:
                if str((proc / "ns" / kind).readlink()) in namespaces:
                    found.append(int(proc.name))
                    break
            except OSError:
                continue
    return found
