"""The Slurm cluster on this machine (nemo_polar/cluster/testcluster.py) and our SPANK plugin: ray.sub's pyxis
options taken, a job's daemons ending with it (proctrack/cgroup), chroot mode, and nothing left when it stops."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from nemo_polar.cli.runtime_check import ROOTFS
from nemo_polar.cluster import netns, slurm
from nemo_polar.cluster.testcluster import FREEZER, SlurmTestCluster
from nemo_polar.cluster.topology import SlurmConfig

from .conftest import requires_nodes, requires_slurm

OPTIONS = ("--container-image", "--container-mounts", "--container-workdir", "--container-name")


def _cmdlines_with(token: str) -> list[int]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if token in (proc / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(proc.name))
        except OSError:
            pass
    return found


def test_the_spank_plugin_takes_ray_subs_container_options(slurm_cluster, tmp_path):
    helptext = slurm_cluster.client("srun", "--help").stdout
    assert all(o in helptext for o in OPTIONS + ("--no-container-mount-home",))
    done = slurm_cluster.client(
        "srun", "--container-image=nemo-rl:7ea279a", "--container-mounts=/opt/a:/opt/a", "--container-name=ray-head",
        f"--container-workdir={tmp_path}", "--no-container-mount-home", "--mpi=pmix", "--gres=gpu:8",
        "bash", "-c", 'pwd; echo "$SPANK_CONTAINER_IMAGE $PMIX_RANK $CUDA_VISIBLE_DEVICES"',
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [str(tmp_path), "nemo-rl:7ea279a 0 0,1,2,3,4,5,6,7"]
    log = (slurm_cluster.root / "log" / "polar_container.log").read_text().splitlines()
    assert (
        f"mode=host image=nemo-rl:7ea279a mounts=/opt/a:/opt/a workdir={tmp_path} name=ray-head no_home=1" in log[-1]
    )


def test_a_jobs_daemons_end_with_it(slurm_cluster, tmp_path):
    """proctrack/cgroup: a process that left the job's session (as Ray's daemons do) is killed at its end."""
    token = f"{uuid.uuid4().int % 10**6}.{os.getpid()}"
    wrap = f"setsid sleep {token} </dev/null >/dev/null 2>&1 & sleep 1; echo started"
    job = slurm.submit(["sbatch", f"--output={tmp_path}/%j.out", "--wrap", wrap], dict(os.environ))
    assert slurm.follow(job, poll_s=0.3).state == "COMPLETED"
    assert (tmp_path / f"{job}.out").read_text().strip() == "started"
    deadline = time.monotonic() + 15
    while _cmdlines_with(f"sleep {token}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _cmdlines_with(f"sleep {token}")


@requires_slurm
def test_a_cluster_without_gres_runs_tasks_chrooted_and_stops_leaving_nothing(tmp_path, monkeypatch):
    rootfs = ROOTFS
    if not (rootfs / "bin" / "sh").exists():
        pytest.skip(f"no root filesystem at {rootfs} (scripts/setup.sh rootfs)")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "f").write_text("from the host\n")
    c = SlurmTestCluster(tmp_path / "c", gpus=0, mode="chroot", ports=(16827, 16828), node="polar-t")
    c.up()
    try:
        monkeypatch.setenv("SLURM_CONF", str(c.conf))
        assert slurm.cluster_args(SlurmConfig(), 8) == ["--partition=batch", f"--account={getpass.getuser()}"]
        done = c.client(
            "srun", f"--container-image={rootfs}", f"--container-mounts={tmp_path / 'data'}:/mnt:ro",
            "--container-workdir=/mnt", "--no-container-mount-home",
            "/bin/sh", "-c", "cat /etc/debian_version f; pwd; touch /mnt/x 2>/dev/null || echo read-only",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr + c.log_tail()
        lines = done.stdout.split()
        assert lines[0].startswith("12.") and " ".join(lines[1:]) == "from the host /mnt read-only"
        assert not (rootfs / "mnt" / "f").exists()  # the mount stayed in the task's namespace
    finally:
        stopped = c.down()
    assert sorted(s.split()[0] for s in stopped) == ["munged", "slurmctld", "slurmd"]
    assert not any(d.alive() for d in c.daemons()) and not c.daemons()
    assert not _cmdlines_with(str(c.conf)) and not (FREEZER / "slurm_polar-t").exists()


def _started(pid: int) -> str | None:
    """A live process's start time; None for none, or a zombie (its namespaces already let go)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _links() -> set[str]:
    return {p.name for p in Path("/sys/class/net").iterdir()}


@requires_nodes
def test_two_nodes_in_their_own_namespaces_reach_only_each_other_and_stop_leaving_nothing(tmp_path):
    links_before, mounts_before = _links(), Path("/proc/self/mountinfo").read_text().count(str(tmp_path))
    kwargs = {"nodes": 2, "node": "tm", "ports": (16847, 16848), "gpus": 2}
    c = SlurmTestCluster(tmp_path / "c", **kwargs)
    # started by another process that then exits, as `polar cluster slurm up` is: stopped by what it recorded
    up = "from nemo_polar.cluster.testcluster import SlurmTestCluster as C; "
    up += f"C({str(c.root)!r}, **{kwargs!r}).up()"
    started = subprocess.run([sys.executable, "-c", up], capture_output=True, text=True, timeout=60, check=False)
    try:
        assert started.returncode == 0, started.stderr[-2000:]
        net = c.network()
        assert c.names == ["tm1", "tm2"] and set(net["nodes"]) == {"tm1", "tm2"}
        assert {net["bridge"], *net["links"]} <= _links() - links_before
        done = c.client(
            "srun", "-N2", "--mpi=pmix", "--gres=gpu:2", "bash", "-c",
            'echo "$(hostname) $PMIX_RANK $(ip -o -4 addr show eth0 | cut -d" " -f7) $(ip route | wc -l) '
            '$(getent hosts tm1 tm2 | wc -l) $(cat /proc/1/comm) $(stat -c %i /tmp/ray)"',
        )  # fmt: skip
        assert done.returncode == 0, done.stderr + c.log_tail()
        lines = sorted(done.stdout.splitlines())
        subnet = net["subnet"].rsplit(".", 1)[0]
        # own name and address, one route (the bridge's subnet: nothing beyond it), both names resolved, the
        # node's pid 1 is our script, and each its own /tmp/ray
        assert [line.split()[:6] for line in lines] == [
            ["tm1", "0", f"{subnet}.11/24", "1", "2", "bash"],
            ["tm2", "1", f"{subnet}.12/24", "1", "2", "bash"],
        ]
        assert lines[0].split()[6] != lines[1].split()[6]
        slurmd = {d.node: d for d in c.daemons() if d.name == "slurmd"}
        for name in c.names:  # slurmd's pid file holds its pid inside the node; we know it by the host's
            inside = int((c.root / "run" / f"slurmd-{name}.pid").read_text())
            assert inside != slurmd[name].pid and slurmd[name].alive()
        # every process living in a node's namespaces now (ids name a namespace only while it lives: the kernel
        # reuses them), known by pid and start time
        kept = set().union(*(set(ns.values()) for ns in net["nodes"].values()))
        inside = {
            (pid, start) for pid in netns.processes_in(kept) if (start := _started(pid)) is not None
        }  # not zombies
        assert {d.pid for d in c.daemons() if d.node} <= {pid for pid, _ in inside}
    finally:
        stopped = c.down()
    assert {s.split()[0] for s in stopped} >= {"munged", "slurmctld", "slurmd"} and f"link {net['bridge']}" in stopped
    assert not any(d.alive() for d in c.daemons()) and not c.network()
    assert not {(pid, start) for pid, start in inside if _started(pid) == start}  # none left in the nodes
    # each veth went with its node's network namespace (the kernel removes it only then), the bridge by us
    assert not _links() & {net["bridge"], *net["links"]}
    assert Path("/proc/self/mountinfo").read_text().count(str(tmp_path)) == mounts_before
    assert not _cmdlines_with(str(c.conf)) and not any((FREEZER / f"slurm_{n}").exists() for n in c.names)


@requires_slurm
def test_up_leaves_a_launch_nothing_to_set_by_hand(slurm_cluster, tmp_path):
    """`up` writes env.sh; sourced in a shell that has nothing of ours (a bare PATH, no SLURM_CONF, no image), a
    launch finds the cluster, `polar`, Ray's CLI where NeMo-RL is found, and a sidecar image name."""
    script = slurm_cluster.root / "env.sh"
    ours = ("SLURM_CONF", "POLAR_CONTAINER", "RAY_AUTH_MODE", "NEMO_RL_PYTHON", "VIRTUAL_ENV")
    bare = {k: v for k, v in os.environ.items() if k not in ours} | {"PATH": "/usr/bin:/bin"}
    launch = f"polar launch slurm --nodes 1 --learn --dry-run --json --no-check run_dir={tmp_path}"
    done = subprocess.run(
        ["bash", "-c", f"source {script} && command -v ray; {launch}"],
        env=bare, capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "nemo-polar:local" in done.stdout and str(slurm_cluster.conf) in script.read_text()
    assert "RAY_AUTH_MODE=disabled" in script.read_text()
    if os.environ.get("NEMO_RL_DIR"):
        assert done.stdout.startswith("/") and done.stdout.split()[0].endswith("/ray")  # ray.sub runs `ray`
