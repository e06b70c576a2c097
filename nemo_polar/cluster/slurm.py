"""What `polar launch slurm` asks a Slurm cluster and tells it, through Slurm's own commands.

NeMo-RL's `ray.sub` carries `#SBATCH --partition=PARTITION` and `#SBATCH --account=ACCOUNT` placeholders in its
header, and sbatch applies a header option unless the command line (or an `SBATCH_*` variable) gives it: so an
unset `slurm.partition` or `slurm.account` is resolved here, at submit, and always passed. An empty value does not
help: `--partition=` is refused, and `--account=` leaves ray.sub's unquoted `-A $SLURM_JOB_ACCOUNT` without its
argument.

- partition: the cluster's default (`sinfo`'s `*`), else a refusal naming the partitions there are;
- account: a cluster that keeps no accounts (`AccountingStorageType=accounting_storage/none`) takes any name and
  ray.sub needs one (its sruns pass `-A`), so the login name; with accounting, the user's default account
  (`sacctmgr`), else a refusal saying to set `slurm.account`;
- `--gres=gpu:N`: where the partition's nodes have GPU GRES, the rule ray.sub follows for its own steps (whose
  `--gres` must fit in the allocation), unless `slurm.gres` says otherwise.

`follow` waits for a job's end. Its state comes from `scontrol show job`, which the controller answers until it
forgets a finished job (`MinJobAge`, 300 s by default), and from `sacct` only where the cluster keeps accounting.
"""

from __future__ import annotations

import getpass
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from .topology import SlurmConfig

ENDED = {
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
    "REVOKED", "SPECIAL_EXIT", "TIMEOUT",
}  # fmt: skip
NO_ACCOUNTS = "accounting_storage/none"


def slurm(*argv: str, timeout: float = 30) -> str:
    """A Slurm client command's stdout; its failure as a ConfigError saying what it said."""
    if not shutil.which(argv[0]):
        raise ConfigError(f"{argv[0]} not found: `polar launch slurm` runs where Slurm's client commands do")
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ConfigError(f"{' '.join(argv)}: no answer in {timeout:.0f} s (is slurmctld up?)") from exc
    if out.returncode:
        raise ConfigError(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr.strip() or out.stdout.strip()}")
    return out.stdout


def partitions() -> tuple[list[str], str | None]:
    """(every partition, the default one or None)."""
    names = [p.strip() for p in slurm("sinfo", "-h", "-o", "%P").split()]
    default = next((p[:-1] for p in names if p.endswith("*")), None)
    return sorted({p.rstrip("*") for p in names}), default


def config_value(key: str) -> str:
    m = re.search(rf"^{key}\s*=\s*(.*)$", slurm("scontrol", "show", "config"), re.M)
    return m.group(1).strip() if m else ""


def has_gpu_gres(partition: str) -> bool:
    return "gpu:" in slurm("sinfo", "-p", partition, "-h", "-o", "%G")


def default_account(user: str) -> str | None:
    if not shutil.which("sacctmgr"):
        return None
    try:
        out = slurm("sacctmgr", "-nP", "show", "user", user, "format=DefaultAccount")
    except ConfigError:
        return None
    return out.strip().splitlines()[0].strip() if out.strip() else None


def cluster_args(s: SlurmConfig, gpus_per_node: int) -> list[str]:
    """The sbatch options the config leaves to the cluster: partition, account, GRES (see the module's note)."""
    args = []
    partition = s.partition
    if not partition:
        names, partition = partitions()
        if not partition:
            raise ConfigError(
                f"slurm.partition: this cluster has no default partition (ray.sub's header would submit to "
                f"'PARTITION'); set slurm.partition to one of: {', '.join(names) or '(none listed)'}"
            )
        args.append(f"--partition={partition}")
    if not s.account:
        user, storage = getpass.getuser(), config_value("AccountingStorageType")
        account = user if storage == NO_ACCOUNTS else default_account(user)
        if not account:
            raise ConfigError(
                f"slurm.account: this cluster keeps accounts ({storage}) and {user}'s default account could not be "
                "read (sacctmgr); set slurm.account (ray.sub's header would submit to 'ACCOUNT')"
            )
        args.append(f"--account={account}")
    if s.gres is None and has_gpu_gres(partition):
        args.append(f"--gres=gpu:{gpus_per_node}")
    return args


def submit(argv: list[str], env: dict[str, str]) -> str:
    """`sbatch --parsable ...`: the job id."""
    out = subprocess.run([argv[0], "--parsable", *argv[1:]], env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise ConfigError(f"sbatch failed ({out.returncode}): {out.stderr.strip()}")
    return out.stdout.strip().split(";")[0]


@dataclass(frozen=True)
class JobEnd:
    job_id: str
    state: str  # Slurm's JobState (COMPLETED, FAILED, ...), or UNKNOWN where no one remembers the job
    exit_code: str  # Slurm's "code:signal"
    source: str  # which command said so: scontrol, sacct, or why neither could


def job_state(job_id: str) -> tuple[str, str] | None:
    """(JobState, ExitCode) as the controller knows them; None once it has forgotten the job."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, check=False)
    if out.returncode:
        if "Invalid job id" in out.stderr:
            return None
        raise ConfigError(f"scontrol show job {job_id}: {out.stderr.strip()}")
    fields = dict(re.findall(r"(\w+)=(\S*)", out.stdout))
    return fields.get("JobState", "UNKNOWN"), fields.get("ExitCode", "")


def _from_sacct(job_id: str) -> JobEnd:
    if config_value("AccountingStorageType") == NO_ACCOUNTS:
        return JobEnd(job_id, "UNKNOWN", "", "the controller forgot the job and this cluster keeps no accounting")
    line = slurm("sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode").strip().splitlines()
    state, code = line[0].split("|") if line else ("UNKNOWN", "")
    return JobEnd(job_id, state.split()[0], code, "sacct")


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def follow(job_id: str, poll_s: float = 2.0, say: Callable[[str], None] = _say) -> JobEnd:
    """Wait until the job has ended; each change of state is said as it happens."""
    last = None
    while True:
        known = job_state(job_id)
        if known is None:
            return _from_sacct(job_id)
        state, code = known
        state = state.split()[0]
        if state != last:
            say(f"job {job_id}: {state}")
            last = state
        if state in ENDED:
            return JobEnd(job_id, state, code, "scontrol")
        time.sleep(poll_s)
