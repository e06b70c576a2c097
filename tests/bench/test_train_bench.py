"""polar bench train: the same sessions as per-request and as prefix-merged rows, through the same GRPO step
on the tiny model. Small sessions (seed 3: short tool results), so the step takes seconds."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter

import pytest

from nemo_polar.bench.merge_corpus import generate
from nemo_polar.bench.train import BUILDERS, rows, run, sampled_ids
from nemo_polar.errors import ConfigError
from nemo_polar.paths import ROOT, TINY_MODEL


def test_both_builders_train_every_sampled_token_and_merged_rows_are_fewer():
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(TINY_MODEL))
    vocab = AutoConfig.from_pretrained(str(TINY_MODEL)).vocab_size
    for case in generate(2, 3, tokenizer, turns=3):
        per, tree = (rows(case.records, b, tokenizer) for b in BUILDERS)
        sampled = Counter(t for r in case.records for t in r.completion_token_ids)
        assert sampled_ids(per) == sampled == sampled_ids(tree)  # each way, every sampled token once
        assert len(per) == 3 and len(tree) == 1
        length = [sum(len(t.prompt_ids) + len(t.response_ids) for t in traces) for traces in (per, tree)]
        assert length[1] < length[0]
        assert max(t for r in per for t in r.prompt_ids + r.response_ids) < vocab  # the tiny model's own ids


def test_the_command_trains_both_ways_and_says_so_in_json():
    out = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "bench", "train", "--json", "--sessions", "2", "--turns", "2,1"]
        + ["--seed", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result = json.loads(out.stdout)
    multi, single = result["shapes"]
    assert [s["turns"] for s in result["shapes"]] == [2, 1] and multi["calls"] == 4
    for builder in BUILDERS:
        assert result[builder] == multi[builder]  # the top level is the first shape, the paper's
        for shape in (multi, single):
            b = shape[builder]
            assert b["trained_tokens"] == shape["sampled_tokens"] > 0
            assert b["updated"] and b["weights_changed"]
            assert math.isfinite(b["loss"]) and b["loss"] != 0.0
            assert b["step_s"] >= b["trainer_s"] > 0
    per, tree = multi["per_request"], multi["prefix_tree"]
    assert (per["rows"], tree["rows"]) == (4, 2) and multi["rows_ratio"] == 2.0
    assert tree["trainer_tokens"] < per["trainer_tokens"]
    assert single["per_request"]["trainer_tokens"] == single["prefix_tree"]["trainer_tokens"]  # one call: one row
    assert result["speedup"] == multi["speedup"] > 0


def test_one_session_is_refused_it_has_no_group_to_learn_from():
    with pytest.raises(ConfigError, match="at least 2 sessions"):
        run(sessions=1, turns=(3,))
