"""`polar bench async`: synchronous against asynchronous GRPO on a long-tailed workload, side by side in one run.

Both arms are `polar learn` through the whole system (rollout server, gateway node, sandboxed sessions, proxy,
vLLM reloading its weights in place) with the same settings and the same agent, `examples/long_tail_agent.py`:
most sessions make one call, about one in `tail`^1.2 makes `tail`, with `tool_s` seconds of "tool" between calls.
`mode=sync` waits each step for its slowest session; `mode=async` keeps groups in flight while it trains and
publishes. Per arm: seconds per step, the engine's busy fraction over the steps (vLLM's own
`vllm:num_requests_running`, `learn/busy.py`), the reward curve, and for async the staleness of what trained (groups
by updates since their oldest call), the groups left out as stale and the sessions sampled by several versions.
"""

from __future__ import annotations

import time
from statistics import fmean, median
from typing import Any

from ..config import load
from ..learn import LearnConfig, learn


def _arm(summary: dict[str, Any]) -> dict[str, Any]:
    history = summary["history"]
    return {
        "steps": summary["steps"],
        "step_s": round(fmean(h["seconds"] for h in history), 2),
        "step_s_median": round(median(h["seconds"] for h in history), 2),
        "busy": summary["busy"],
        "reward_first": summary["reward_first"],
        "reward_last": summary["reward_last"],
        "rewards": [h["reward"] for h in history],
        "max_logprob_err": summary["max_logprob_err"],
        "ages": summary["ages"],
        "stale_sessions": summary["stale"],
        "spanning_sessions": summary["spanning"],
        "left_out": sum(h["left_out"] for h in history),
        "seconds": summary["seconds"],
        "run_dir": summary["run_dir"],
    }


def run(
    steps: int = 20,
    prompts: int = 4,
    samples: int = 8,
    tail: float = 8.0,
    tool_s: float = 2.0,
    max_age: int = 1,
    lr: float = 0.006,
    overrides: list[str] | None = None,
) -> dict[str, Any]:
    common = [
        f"steps={steps}",
        f"prompts={prompts}",
        f"samples={samples}",
        f"lr={lr}",
        f"max_age={max_age}",
        "solved_after=null",  # both arms run every step: the same number of updates
        f"harness.command=python3 long_tail_agent.py --tail {tail} --tool-s {tool_s}",
        # every session of the groups in flight can run at once: the engine, not the pool, is what is measured
        f"capacity.run={prompts * samples * (max_age + 1)}",
        f"capacity.ready={prompts * samples * (max_age + 1)}",
        *(overrides or []),
    ]
    t0 = time.monotonic()
    arms = {mode: _arm(learn(load(LearnConfig, "learn", [*common, f"mode={mode}"]))) for mode in ("sync", "async")}
    out: dict[str, Any] = {"workload": {"steps": steps, "prompts": prompts, "samples": samples, "tail": tail}}
    out["workload"] |= {"tool_s": tool_s, "max_age": max_age, "lr": lr}
    for mode, arm in arms.items():
        out |= {f"{key}_{mode}": value for key, value in arm.items()}
    out["speedup"] = round(arms["sync"]["step_s"] / arms["async"]["step_s"], 2)
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out
