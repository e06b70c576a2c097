"""A cache: reading an entry must make it the most recently used one."""

from ..model import BundledTask, append_hidden, src

TASK = BundledTask(
    name="lru_cache",
    summary="cache eviction",
    problem_statement=src("""
        `LRUCache` evicts entries that were just read. With capacity 2: `put("a")`, `put("b")`,
        `get("a")`, `put("c")` evicts `"a"`, but `"b"` is the least recently used entry and should
        be the one to go. `get` of a missing key must keep returning the default.
        """),
    files={
        "cachekit/__init__.py": "",
        "cachekit/lru.py": src("""
            from collections import OrderedDict


            class LRUCache:
                def __init__(self, capacity: int) -> None:
                    if capacity < 1:
                        raise ValueError("capacity must be at least 1")
                    self.capacity = capacity
                    self._data: OrderedDict = OrderedDict()

                def get(self, key, default=None):
                    return self._data.get(key, default)

                def put(self, key, value) -> None:
                    self._data[key] = value
                    self._data.move_to_end(key)
                    while len(self._data) > self.capacity:
                        self._data.popitem(last=False)

                def __len__(self) -> int:
                    return len(self._data)
            """),
        "tests/test_lru.py": src("""
            import pytest

            from cachekit.lru import LRUCache


            def test_evicts_oldest_insert():
                c = LRUCache(2)
                c.put("a", 1)
                c.put("b", 2)
                c.put("c", 3)
                assert c.get("a") is None and c.get("c") == 3 and len(c) == 2


            def test_missing_key_default():
                assert LRUCache(1).get("nope", "d") == "d"


            def test_capacity_checked():
                with pytest.raises(ValueError):
                    LRUCache(0)
            """),
    },
    fix={
        "cachekit/lru.py": [
            (
                "        return self._data.get(key, default)\n",
                "        if key not in self._data:\n"
                "            return default\n"
                "        self._data.move_to_end(key)\n"
                "        return self._data[key]\n",
            )
        ]
    },
    # refreshes recency, but a missing key now raises instead of returning the default
    wrong_fix={
        "cachekit/lru.py": [
            (
                "        return self._data.get(key, default)\n",
                "        self._data.move_to_end(key)\n        return self._data[key]\n",
            )
        ]
    },
    hidden_tests={
        "tests/test_lru.py": [
            append_hidden("""
                def test_get_refreshes_recency():
                    c = LRUCache(2)
                    c.put("a", 1)
                    c.put("b", 2)
                    assert same(c.get("a"), 1)
                    c.put("c", 3)
                    assert c.get("b") is None and same(c.get("a"), 1) and same(c.get("c"), 3)
                """),
        ]
    },
    fail_to_pass=["tests/test_lru.py::test_get_refreshes_recency"],
    pass_to_pass=[
        "tests/test_lru.py::test_evicts_oldest_insert",
        "tests/test_lru.py::test_missing_key_default",
        "tests/test_lru.py::test_capacity_checked",
    ],
)
