"""A real Slurm cluster on this machine for the whole test session (nemo_polar/cluster/testcluster.py); its
tests skip, saying why, where the machine cannot run one (not root, Slurm not installed, no cgroup v1 freezer)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nemo_polar.cluster.testcluster import SlurmTestCluster, missing

SLURM_MISSING = missing()
requires_slurm = pytest.mark.skipif(SLURM_MISSING is not None, reason=SLURM_MISSING or "")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> Iterator[SlurmTestCluster]:
    """One node with 8 fake GPUs as GPU GRES, our SPANK plugin in host mode; SLURM_CONF set while it runs."""
    if SLURM_MISSING:
        pytest.skip(SLURM_MISSING)
    c = SlurmTestCluster(tmp_path_factory.mktemp("slurm"))
    c.up()
    mp = pytest.MonkeyPatch()
    mp.setenv("SLURM_CONF", str(c.conf))
    try:
        yield c
    finally:
        mp.undo()
        c.down()
