"""The guard on the proxy's memory: a short `polar bench memory` run, each shape on a proxy process of its
own. Memory must follow what is open, not how many calls were made: a proxy that keeps anything per call
(the reference cycles of a session's kept history did, 0.4 MB per 256 KB call here) fails the closed
shapes, and one whose open sessions are not bounded by bytes fails the open one."""

from __future__ import annotations

import os

import pytest

from nemo_polar.bench.memory import GROWTH_MB, OPEN_FACTOR, SHAPES, run, servers


def test_memory_follows_what_is_open_not_the_number_of_calls():
    cache_mb = 64
    out = run(calls=120, cache_mb=cache_mb, prompt_kb=256, turns=40, turn_kb=4)
    shapes = out["shapes"]
    assert set(shapes) == set(SHAPES)
    for name, shape in shapes.items():
        assert shape["calls"] == 120 and shape["sent_mb"] > 1, (name, shape)
        assert shape["rss_mb"]["peak"] >= shape["rss_mb"]["end"] > 0, (name, shape)
        if name != "new_open":
            assert shape["growth_second_half_mb"] < GROWTH_MB, (name, shape["samples"])
    opened = shapes["new_open"]
    # 120 open sessions of 256 KB each are over 64 MB (about 1 MB charged each): the cache is full and evicting,
    # and the proxy holds no more than the bound allows
    assert opened["rss_mb"]["end"] - opened["rss_mb"]["start"] <= OPEN_FACTOR * cache_mb, opened["samples"]
    assert opened["rss_mb"]["end"] - opened["rss_mb"]["start"] > cache_mb / 2, opened["samples"]  # it does keep
    assert out["held"]


@pytest.mark.skipif(
    not os.path.exists("/usr/bin/bwrap"), reason="needs bubblewrap: the sessions run in local sandboxes"
)
def test_the_rollout_server_and_a_gateway_node_stay_flat_over_many_sessions():
    out = servers(sessions=160, group=8, open_tasks=2)
    assert out["sessions"] == out["completed"] == 160, out
    for name in ("rollout_server", "gateway_node"):
        process = out[name]
        assert len(process["samples"]) >= 10 and process["rss_mb"]["end"] > 0, (name, process)
        assert process["growth_second_half_mb"] < GROWTH_MB, (name, process["samples"])
    assert out["held"]
