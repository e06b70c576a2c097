"""Ids for responses, output items and records: unique, not secret.

`uuid.uuid4()` reads the OS entropy pool on every call, a syscall that costs several microseconds
in a VM, and a streamed call makes up to three. The `random` module's generator is seeded from that
pool once (and again in a forked child), which is all an id needs.
"""

from __future__ import annotations

import random


def new_hex() -> str:
    """32 random hex digits, the shape of `uuid4().hex`."""
    return f"{random.getrandbits(128):032x}"
