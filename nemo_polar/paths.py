"""Where the project is on this machine: the repository, the dependencies set-up builds, the tiny model.

`POLAR_DEPS` moves the dependencies (`scripts/setup.sh` builds them there); everything else is found from
this file. Standard library only: every layer reads these.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository: recipes/, gym/, docs/, examples/
DEPS = Path(os.environ.get("POLAR_DEPS", ROOT / ".deps"))  # what scripts/setup.sh builds
TINY_MODEL = DEPS / "models" / "tiny"  # the test model (local/tiny_model.py, polar model build)
