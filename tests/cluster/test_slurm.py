"""`polar launch slurm`'s dealings with a real Slurm cluster (nemo_polar/cluster/slurm.py): what the config leaves
unset is the cluster's, so ray.sub's `PARTITION` and `ACCOUNT` header placeholders never apply; a job is followed
to its end and its state reported."""

from __future__ import annotations

import getpass
import os
import subprocess

import pytest

from nemo_polar.cluster import slurm
from nemo_polar.cluster.topology import SlurmConfig
from nemo_polar.errors import ConfigError

HEADER = "#!/bin/bash\n#SBATCH --account=ACCOUNT\n#SBATCH --partition=PARTITION\n"  # ray.sub's placeholders


def _sbatch(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sbatch", *argv], capture_output=True, text=True, timeout=30)


def test_unset_partition_and_account_are_the_clusters_and_override_ray_subs_header(slurm_cluster, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text(HEADER + 'echo "partition=$SLURM_JOB_PARTITION account=$SLURM_JOB_ACCOUNT"\n')
    plain = _sbatch(str(script))  # what `polar launch slurm` did without slurm.partition
    assert plain.returncode != 0 and "invalid partition specified: PARTITION" in plain.stderr
    args = slurm.cluster_args(SlurmConfig(), 8)  # no accounting here: the login name, as ray.sub needs one
    assert args == ["--partition=batch", f"--account={getpass.getuser()}", "--gres=gpu:8"]
    job = slurm.submit(["sbatch", f"--output={tmp_path}/slurm-%j.out", *args, str(script)], dict(os.environ))
    end = slurm.follow(job, poll_s=0.3)
    assert (end.state, end.exit_code, end.source) == ("COMPLETED", "0:0", "scontrol")
    out = (tmp_path / f"slurm-{job}.out").read_text().split()
    assert out == ["partition=batch", f"account={getpass.getuser()}"]
    assert slurm.cluster_args(SlurmConfig(partition="batch", account="acct", gres=False), 8) == []


def test_a_cluster_without_a_default_partition_is_refused_naming_its_partitions(slurm_cluster):
    assert slurm_cluster.client("scontrol", "update", "PartitionName=batch", "Default=NO").returncode == 0
    try:
        with pytest.raises(ConfigError, match=r"slurm.partition: .*no default partition.*one of: batch"):
            slurm.cluster_args(SlurmConfig(), 8)
    finally:
        assert slurm_cluster.client("scontrol", "update", "PartitionName=batch", "Default=YES").returncode == 0
    assert slurm.partitions() == (["batch"], "batch")


def test_a_failed_job_is_followed_to_its_state_and_exit_code(slurm_cluster, tmp_path):
    said = []
    job = slurm.submit(["sbatch", f"--output={tmp_path}/%j.out", "--wrap", "sleep 1; exit 3"], dict(os.environ))
    end = slurm.follow(job, poll_s=0.3, say=said.append)
    assert (end.state, end.exit_code) == ("FAILED", "3:0") and said[-1] == f"job {job}: FAILED"
    gone = slurm.follow("987654", say=said.append)  # forgotten by the controller, and no accounting to ask
    assert gone.state == "UNKNOWN" and "keeps no accounting" in gone.source
