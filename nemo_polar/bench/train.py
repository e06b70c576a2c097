"""`polar bench train`: what the trainer pays for per-request traces against prefix-merged ones.

The Polar paper's efficiency table (research/async_grpo.md, polar.md): merging a session's calls by
prefix took a run from 1,185 trainer rows to 218 over three steps, and the training wall clock from
189.5 to 35.2 minutes (5.39x), at about 5.4 model calls per session. Here, on this machine:

- sessions: `merge_corpus.generate` with a fixed number of calls ("turns") per session, rendered with
  the tiny model's own tokenizer, so every id is one of the model's tokens (the corpus's usual Qwen
  tokenizer has a vocabulary 36 times the tiny model's). No sub-agents, no compaction: one chain each.
- rows, two ways, by our builders: per_request (`traces.builders.per_request`, one trace per call) and
  prefix_tree (`traces.build`, one trace per chain, every sampled token once).
- the trainer, the same for both: `learn.policy.Policy` on the tiny model, one GRPO step over the
  shape's rows (`Policy.update`: teacher-forced forward, PPO-clip loss, backward, one Adam step), from
  the same starting weights. A row is a `Sample`: prompt + response ids, the loss mask, the recorded
  logprobs; its reward is its session's (1, 0, 1, ...: one group, so the advantages are not all 0).

trainer_s is that step's wall time, build_s the builder's, step_s their sum; trainer_cpu_s the step's CPU
time (all threads), steadier than the wall time when other jobs share the cores. The cost follows the
tokens: per-request rows repeat each call's whole prompt, so their tokens grow with the square of the
session's length, the merged rows' linearly.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..paths import TINY_MODEL
from ..records import CompletionRecord
from ..traces import build
from ..traces.builders import per_request, trainable
from ..traces.models import BuildStats, Trace
from .merge_corpus import generate

BUILDERS = ("per_request", "prefix_tree")
PAPER = {"rows": {"per_request": 1185, "prefix_tree": 218}, "trainer_minutes": [189.5, 35.2], "speedup": 5.39}
LR = 1e-3


def rows(records: list[CompletionRecord], builder: str, tokenizer) -> list[Trace]:
    """A session's trainer rows by one builder."""
    if builder == "per_request":
        return per_request(trainable(records, BuildStats()), BuildStats())
    return build(records, builder, tokenizer=tokenizer).traces


def samples(sessions: list[list[Trace]]):
    """Every session's rows as Samples of one group, each with its session's reward (1, 0, 1, ...)."""
    from ..learn.policy import Sample

    out = []
    for i, traces in enumerate(sessions):
        for t in traces:
            blank = [0] * len(t.prompt_ids)
            out.append(
                Sample(
                    tokens=t.prompt_ids + t.response_ids,
                    mask=blank + t.loss_mask,
                    logprobs=[0.0] * len(blank) + t.response_logprobs,
                    reward=float(i % 2 == 0),
                    group=0,
                )
            )
    return out


def sampled_ids(traces: list[Trace]) -> Counter:
    """The ids a session's rows train (loss mask 1), with how often."""
    return Counter(tok for t in traces for tok, m in zip(t.response_ids, t.loss_mask, strict=True) if m)


def _train(model: Path, batch) -> dict[str, Any]:
    """One GRPO step over `batch` from the model's saved weights: its wall time, its loss, whether it moved them."""
    from ..learn.policy import Policy

    policy = Policy(model, lr=LR)
    before = [p.detach().clone() for p in policy.model.parameters()]
    t0, cpu0 = time.perf_counter(), time.process_time()
    result = policy.update(batch)
    trainer_s, cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    moved = max(float((p.detach() - b).abs().max()) for p, b in zip(policy.model.parameters(), before, strict=True))
    return {
        "trainer_s": trainer_s,
        "cpu_s": cpu_s,
        "loss": result["loss"],
        "updated": bool(result["updated"]),
        "moved": moved > 0,
    }


def _warm_up(model: Path) -> None:
    """torch's first forward and backward in a process pay a one-off set-up: not the first builder's cost."""
    from ..learn.policy import Sample

    tokens = list(range(3, 67))
    _train(model, [Sample(tokens, [0] * 32 + [1] * 32, [-1.0] * 64, float(r), 0) for r in (0, 1)])


def measure_shape(turns: int, sessions: int, seed: int, model: Path, tokenizer, max_positions: int) -> dict[str, Any]:
    cases = generate(sessions, seed, tokenizer, turns=turns)
    out: dict[str, Any] = {
        "turns": turns,
        "sessions": sessions,
        "calls": sum(len(c.records) for c in cases),
        "sampled_tokens": sum(len(r.completion_token_ids) for c in cases for r in trainable(c.records, BuildStats())),
    }
    for builder in BUILDERS:
        t0 = time.perf_counter()
        built = [rows(c.records, builder, tokenizer) for c in cases]
        build_s = time.perf_counter() - t0
        batch = samples(built)
        longest = max(len(s.tokens) for s in batch)
        if longest > max_positions:
            raise ConfigError(
                f"bench train: a {builder} row of {longest} tokens at {turns} turns is past the tiny model's "
                f"{max_positions} positions; measure shorter sessions (--turns)"
            )
        trained = _train(model, batch)
        out[builder] = {
            "rows": len(batch),
            "trainer_tokens": sum(len(s.tokens) for s in batch),
            "trained_tokens": sum(t.trained_tokens for traces in built for t in traces),
            "longest_row": longest,
            "build_s": round(build_s, 3),
            "trainer_s": round(trained["trainer_s"], 2),
            "step_s": round(build_s + trained["trainer_s"], 2),
            "trainer_cpu_s": round(trained["cpu_s"], 2),
            "loss": trained["loss"],
            "updated": trained["updated"],
            "weights_changed": trained["moved"],
        }
    per, tree = out["per_request"], out["prefix_tree"]
    out["speedup"] = round(per["trainer_s"] / tree["trainer_s"], 2)
    out["cpu_speedup"] = round(per["trainer_cpu_s"] / tree["trainer_cpu_s"], 2)
    out["rows_ratio"] = round(per["rows"] / tree["rows"], 2)
    out["tokens_ratio"] = round(per["trainer_tokens"] / tree["trainer_tokens"], 2)
    return out


def run(sessions: int = 2, turns: tuple[int, ...] = (5, 8, 12), seed: int = 0, model: Path = TINY_MODEL) -> dict:
    """One row of the table per session length in `turns`; the first is the paper's shape."""
    if sessions < 2:
        raise ConfigError("bench train: at least 2 sessions (one reward each: a group needs two to have signal)")
    if not Path(model, "config.json").is_file():
        raise ConfigError(f"bench train: no tiny model at {model}; build it with `polar model build`")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    max_positions = json.loads(Path(model, "config.json").read_text())["max_position_embeddings"]
    t0 = time.perf_counter()
    _warm_up(model)
    shapes = [measure_shape(t, sessions, seed, model, tokenizer, max_positions) for t in turns]
    first = shapes[0]
    return {
        "per_request": first["per_request"],
        "prefix_tree": first["prefix_tree"],
        "speedup": first["speedup"],
        "rows_ratio": first["rows_ratio"],
        "shapes": shapes,
        "paper": PAPER,
        "settings": {
            "sessions": sessions,
            "turns": list(turns),
            "seed": seed,
            "lr": LR,
            "max_positions": max_positions,
        },
        "seconds": round(time.perf_counter() - t0, 1),
    }


def table(result: dict) -> str:
    """The result as the paper's table: a line per shape and builder."""
    head = (
        f"{'calls/session':>13} {'builder':<12} {'rows':>5} {'tokens':>9} {'build_s':>8} {'trainer_s':>9} "
        f"{'step_s':>8} {'cpu_s':>8}"
    )
    lines = [head]
    for s in result["shapes"]:
        for builder in BUILDERS:
            b = s[builder]
            lines.append(
                f"{s['turns']:>13} {builder:<12} {b['rows']:>5} {b['trainer_tokens']:>9,} {b['build_s']:>8.3f} "
                f"{b['trainer_s']:>9.2f} {b['step_s']:>8.2f} {b['trainer_cpu_s']:>8.2f}"
            )
        lines.append(
            f"{'':>13} speedup {s['speedup']:.2f}x (cpu {s['cpu_speedup']:.2f}x, rows {s['rows_ratio']:.2f}x, "
            f"tokens {s['tokens_ratio']:.2f}x)"
        )
    paper = result["paper"]
    lines.append(
        f"paper: {paper['rows']['per_request']:,} -> {paper['rows']['prefix_tree']} rows, "
        f"{paper['trainer_minutes'][0]} -> {paper['trainer_minutes'][1]} trainer minutes = {paper['speedup']}x"
    )
    return "\n".join(lines)
