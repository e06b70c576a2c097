"""A real Slurm cluster on this machine for the whole test session (nemo_polar/cluster/testcluster.py): one node, and
two nodes each in its own namespaces (netns.py); its tests skip, saying why, where the machine cannot run one (not
root, Slurm not installed, no cgroup v1 freezer, no namespaces)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nemo_polar.cluster import netns
from nemo_polar.cluster.testcluster import SlurmTestCluster, missing

SLURM_MISSING = missing()
requires_slurm = pytest.mark.skipif(SLURM_MISSING is not None, reason=SLURM_MISSING or "")
NODES_MISSING = SLURM_MISSING or netns.missing()
requires_nodes = pytest.mark.skipif(NODES_MISSING is not None, reason=NODES_MISSING or "")


def _session_cluster(c: SlurmTestCluster) -> Iterator[SlurmTestCluster]:
    c.up()
    mp = pytest.MonkeyPatch()
    mp.setenv("SLURM_CONF", str(c.conf))
    try:
        yield c
    finally:
        mp.undo()
        c.down()


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> Iterator[SlurmTestCluster]:
    """One node with 8 fake GPUs as GPU GRES, our SPANK plugin in host mode; SLURM_CONF set while it runs."""
    if SLURM_MISSING:
        pytest.skip(SLURM_MISSING)
    yield from _session_cluster(SlurmTestCluster(tmp_path_factory.mktemp("slurm")))


@pytest.fixture(scope="session")
def slurm_cluster2(tmp_path_factory) -> Iterator[SlurmTestCluster]:
    """Two nodes, tn1 and tn2, each in its own network, UTS, PID and mount namespaces on a bridge of this machine,
    8 fake GPUs each; its own ports, so it runs beside `slurm_cluster`; SLURM_CONF set while it runs."""
    if NODES_MISSING:
        pytest.skip(NODES_MISSING)
    c = SlurmTestCluster(tmp_path_factory.mktemp("slurm2"), nodes=2, node="tn", ports=(16837, 16838))
    yield from _session_cluster(c)


@pytest.fixture
def lossy_cluster(tmp_path_factory) -> Iterator[SlurmTestCluster]:
    """Two nodes of a test's own (tf1, tf2; other ports, another bridge), for a test that loses one."""
    if NODES_MISSING:
        pytest.skip(NODES_MISSING)
    c = SlurmTestCluster(tmp_path_factory.mktemp("lossy"), nodes=2, node="tf", ports=(16839, 16840))
    yield from _session_cluster(c)
