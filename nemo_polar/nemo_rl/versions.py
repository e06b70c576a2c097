"""The one tested version set: the NeMo-RL commit, the NeMo Gym versions our servers run under, the container.

`polar launch slurm` and `polar recipes check` read these; docs/training.md
states them. NeMo-RL's Gym-path rollouts are masked through `instance_config.mask_sample`, which its
releases up to v0.7.0 never read: with them an infrastructure failure would train as a reward of 0.
"""

from __future__ import annotations

import re

NEMO_RL_COMMIT = "7ea279abfbeb698b092856d0dab61e7cf39bc909"  # main, 2026-08-22
NEMO_RL_GYM = "0.5.1"  # the Gym that commit pins (3rdparty/Gym-workspace/Gym @ c3bac963)
GYM_VERSIONS = ("0.5.1", "0.7.0")  # our Gym servers run under both; 0.7.0-only features are used where present
# A NeMo-RL image built from that commit (its docker/Dockerfile); no release image carries it yet.
CONTAINER = f"nemo-rl:{NEMO_RL_COMMIT[:7]}"
# Releases that ignore `instance_config.mask_sample` (v0.7.0 pairs with Gym 0.4.0 and has no mask at all).
_LAST_RELEASE_WITHOUT_MASK = (0, 7, 0)


def ignores_mask_sample(container: str) -> bool:
    """True for a NeMo-RL release image (`...nemo-rl:vX.Y.Z`) up to v0.7.0."""
    name, _, tag = container.rpartition(":")
    found = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:[.\-].*)?", tag)
    if "nemo-rl" not in name or found is None:
        return False
    return tuple(int(x) for x in found.groups()) <= _LAST_RELEASE_WITHOUT_MASK
