"""Our side of NeMo-RL: where it is, which version set we test, and its own code run on our output.

Nothing here re-implements NeMo-RL: `locate()` finds a checkout and a Python that imports it, and
`worker.py` runs NeMo-RL's loader, config types, Gym entry-point checks and post-processing there.
"""

from .locate import NemoRL, NemoRLFailed, NemoRLNotFound, locate
from .versions import CONTAINER, GYM_VERSIONS, NEMO_RL_COMMIT, NEMO_RL_GYM, ignores_mask_sample

__all__ = [
    "CONTAINER",
    "GYM_VERSIONS",
    "NEMO_RL_COMMIT",
    "NEMO_RL_GYM",
    "NemoRL",
    "NemoRLFailed",
    "NemoRLNotFound",
    "ignores_mask_sample",
    "locate",
]
