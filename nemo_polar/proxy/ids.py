"""Ids for responses, output items and records: unique, not secret.

`uuid.uuid4()` reads the OS entropy pool on every call, a syscall that costs several microseconds
in a VM, and a streamed call makes up to three. The `random` module's generator is seeded from that
pool once (and again in a forked child), which is all an id needs.
"""

from __future__ import annotations

import random
import time


def new_hex() -> str:
    """32 random hex digits, the shape of `uuid4().hex`."""
    return f"{random.getrandbits(128):032x}"


def ordered_hex() -> str:
    """32 hex digits that sort by creation time (nanoseconds, then 64 random bits): a record's id, so
    that the store's index on it grows at its end, not at a random page per insert (a third of an
    insert's cost, and more once the index no longer fits in memory)."""
    return f"{time.time_ns():016x}{random.getrandbits(64):016x}"
