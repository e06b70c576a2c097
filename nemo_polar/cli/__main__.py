"""`python -m nemo_polar.cli`, as the tests and benchmarks start it."""

import os
import sys

from . import main

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.exit(main())
