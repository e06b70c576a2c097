"""The session cache's accounting under threads: the store's writer thread encodes records while the loop serves
calls, so every count the cache keeps is read and written under its lock."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import pytest

from nemo_polar import session_cache
from nemo_polar.session_cache import SessionCache


class OwnedLock:
    """A lock that knows which thread holds it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.owner: int | None = None

    def __enter__(self) -> OwnedLock:
        self._lock.acquire()
        self.owner = threading.get_ident()
        return self

    def __exit__(self, *exc: object) -> None:
        self.owner = None
        self._lock.release()


class Watched(SessionCache):
    """A cache whose count of freed bytes is watched: each write checked to come from the lock's holder (when
    `strict`), each reset adding what it cleared to `trimmed` (so `trimmed + _freed` is every byte freed), and
    each read letting the other threads run before the write that follows it."""

    def __init__(self, limit_bytes: int, strict: bool) -> None:
        self.strict, self.trimmed, self.unlocked_writes = strict, 0, 0
        super().__init__(limit_bytes)
        self._lock = OwnedLock()  # type: ignore[assignment]

    @property  # type: ignore[override]
    def _freed(self) -> int:
        value = self.__dict__["freed"]
        time.sleep(0)  # the other threads run between this read and its write: only the lock keeps them out
        return value

    @_freed.setter
    def _freed(self, value: int) -> None:
        lock = self.__dict__.get("_lock")
        if isinstance(lock, OwnedLock) and lock.owner != threading.get_ident():
            self.unlocked_writes += 1
            assert not self.strict, "the freed-bytes count was written without the lock"
        if value == 0:
            self.trimmed += self.__dict__.get("freed", 0)
        self.__dict__["freed"] = value


@pytest.fixture
def trims(monkeypatch) -> Iterator[list[int]]:
    """A trim every 1000 bytes freed, counted instead of asking glibc."""
    done: list[int] = []
    monkeypatch.setattr(session_cache, "_TRIM_AFTER", 1000)
    monkeypatch.setattr(session_cache, "_MALLOC_TRIM", done.append)
    yield done


def test_the_freed_bytes_count_is_reset_under_the_lock(trims):
    """Deterministic: the reset that starts a new count is a write like any other, made holding the lock (it was
    made after the lock was let go, where another thread's count in between was lost or counted twice)."""
    cache = Watched(10_000, strict=True)
    cache.put("history", "s1", "a", 800)
    cache.put("history", "s1", "b", 800)  # 800 freed
    cache.put("history", "s1", "c", 800)  # 1600 freed: a trim, the count restarts
    cache.drop("history", "s1")
    assert trims == [0] and cache.trimmed == 1600 and cache._freed == 800 and cache.unlocked_writes == 0


def test_the_freed_bytes_are_counted_exactly_under_threads(trims):
    """Threads put (replacing and evicting), drop and forget at once; every byte charged and no longer held is
    counted once: in a trim or in the count since. The old reset, made after the lock was let go, raced the other
    threads' counts: one added between the reset's read and its write was counted twice, or lost. That window is a
    few bytecodes wide, so the watched read yields to the other threads (`time.sleep(0)`) to open it every time:
    the old code failed this in every run, its count near twice the bytes freed; under the lock the yield changes
    nothing."""
    cache = Watched(20_000, strict=False)
    charged = [0] * 4

    def hammer(n: int) -> None:
        rng = random.Random(n)
        for i in range(1500):
            session = f"s{rng.randrange(8)}"
            op = rng.random()
            if op < 0.7:
                size = rng.randrange(1, 600)
                cache.put(rng.choice(("history", "ids", "record")), session, i, size)
                charged[n] += size
            elif op < 0.9:
                cache.drop(rng.choice(("history", "ids", "record")), session)
            else:
                cache.forget(session)

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.bytes == sum(size for _, size in cache._entries.values())
    assert cache.trimmed + cache._freed == sum(charged) - cache.bytes
    assert cache.unlocked_writes == 0
    assert trims and cache.trimmed > 1000 * len(trims)  # each trim after more than its 1000 bytes
