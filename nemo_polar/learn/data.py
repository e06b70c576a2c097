"""From finished sessions to what the update trains on, by NeMo-RL's path.

Each session becomes the Gym `/run` result our Gym agent returns (`nemo_polar.env.gym.rollout_result`),
and the results become training samples by NeMo-RL's own post-processing (`nemo_polar.nemo_rl`, its Gym
rollout loop's code: contiguity, message logs, reward, mask_sample), so the loop trains on exactly what
NeMo-RL would. Without a NeMo-RL checkout the same Gym items are read directly (`_read_items`): their
token fields, concatenated in order, masked where sampled.

With NeMo-RL's own rollout collection (`rollouts=nemo_rl`) the step's rows are `gym_rows`, NeMo-RL's Gym actor runs
them through our Gym servers, and its post-processed samples come back (`nemo_polar.env.nemo_rl_actor`).

Every chain (`chains=True`, NeMo-RL's loss only): each further chain of a rollout's `training_traces` is made into
Gym items exactly as the primary is and post-processed by the same NeMo-RL function as a row of its own, which
takes its rollout's advantage (`nemo_polar.nemo_rl.worker`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..env import gym as polar_gym
from ..nemo_rl.locate import Commands
from ..nemo_rl.wire import TrainBatch
from ..traces.export import envelope_trace, gym_output_items
from .policy import Sample

AGENT = {"type": "responses_api_agents", "name": "polar_agent"}


def gym_results(tasks: list[tuple[str, dict[str, Any]]]) -> tuple[list[dict], list[dict]]:
    """(rows, results): one Gym row and `/run` result per session of each (instruction, task) given as
    `GET /tasks/{id}` answers it, the samples of each task together."""
    rows, results = [], []
    for instruction, task in tasks:
        row = {"responses_create_params": {"input": [{"role": "user", "content": instruction}]}, "agent_ref": AGENT}
        for session in sorted(task["sessions"], key=lambda s: s["sample_index"]):
            rows.append(row)
            results.append(polar_gym.rollout_result(row, session, task_id=task["task_id"]))
    return rows, results


def further_chains(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each trained chain of each unmasked rollout besides its primary: {logical: the result's index, result: the
    result with that chain as its output}."""
    out = []
    for i, result in enumerate(results):
        envelope, primary = result.get("training_traces"), (result.get("polar") or {}).get("primary_chain")
        if not envelope or primary is None or result.get("mask_sample"):
            continue
        for k, entry in enumerate(envelope["traces"]):
            if k != primary and any(entry["loss_mask"]):
                output = gym_output_items(envelope_trace(entry))
                out.append({"logical": i, "result": result | {"response": result["response"] | {"output": output}}})
    return out


def built(results: list[dict[str, Any]]) -> dict[str, int]:
    """What the unmasked rollouts hold: their chains with a sampled token of their own, and their unique sampled
    tokens (each owned by one chain of its rollout)."""
    owned = [
        sum(e["loss_mask"])
        for r in results
        if r.get("training_traces") and not r.get("mask_sample")
        for e in r["training_traces"]["traces"]
    ]
    return {"chains_built": sum(n > 0 for n in owned), "sampled_tokens": sum(owned)}


def batch_counts(train: TrainBatch | None) -> dict[str, int]:
    """What NeMo-RL's loss trains on in its batch (None: no group survived, nothing): its rows (a rollout's, and a
    further chain's with every chain), those with a trained token, the tokens (each row's after the first)."""
    if train is None:
        return {"rows": 0, "chains_trained": 0, "trained_tokens": 0, "chains_refused": 0}
    trained = [sum(m[1:]) * w for m, w in zip(train["token_mask"], train["sample_mask"], strict=True)]
    return {
        "rows": train["rows"],
        "chains_trained": sum(t > 0 for t in trained),
        "trained_tokens": int(sum(trained)),
        "chains_refused": train["chains_refused"],
    }


def sample_counts(batch: list[Sample]) -> dict[str, int]:
    """What our own loss trains on, counted as `batch_counts` counts NeMo-RL's: a row per unmasked rollout (its
    primary chain), those with a sampled token, those tokens."""
    tokens = [sum(s.mask) for s in batch]
    return {
        "rows": len(batch),
        "chains_trained": sum(t > 0 for t in tokens),
        "trained_tokens": sum(tokens),
        "chains_refused": 0,
    }


def samples(
    tasks: list[tuple[str, dict[str, Any]]],
    tokenizer: Path,
    nemo_rl: Commands | None,
    recipe: tuple[Path, list[str]] | None = None,
    chains: bool = False,
) -> tuple[list[Sample], list[str], TrainBatch | None]:
    """The unmasked samples of every task's sessions (group = task), why any were left out, and, with a
    `recipe` (path, overrides), the GRPO training batch NeMo-RL built from them under it (for its loss), every
    chain's row in it with `chains`."""
    rows, results = gym_results(tasks)
    group_size = len(tasks[0][1]["sessions"]) if tasks else 1
    train = None
    if nemo_rl is not None and recipe is not None:
        more = {"chains": further_chains(results)} if chains else {}
        judged, train = nemo_rl.grpo_batch(rows, results, group_size, tokenizer, recipe[0], recipe[1], **more)
        if train is not None:
            train |= built(results)
    elif nemo_rl is not None:
        judged = nemo_rl.postprocess(rows, results, group_size, tokenizer)
    else:
        judged = [_read_items(r) for r in results]
    out, left_out = training_samples(judged, group_size, [r.get("failure_reason") for r in results])
    return out, left_out, train


def training_samples(
    judged: list[dict[str, Any]], group_size: int, reasons: list[str | None] | None = None
) -> tuple[list[Sample], list[str]]:
    """The unmasked samples NeMo-RL (or `_read_items`) judged, one per rollout in group order, and why the others
    were left out (`reasons`: each rollout's failure reason, where known)."""
    out, left_out = [], []
    for i, sample in enumerate(judged):
        if "error" in sample or sample["mask_sample"]:
            left_out.append(sample.get("error") or (reasons[i] if reasons else None) or "masked")
            continue
        tokens, mask, logprobs = [], [], []
        for m in sample["message_log"]:
            tokens += m["token_ids"]
            mask += [int(m["role"] == "assistant")] * len(m["token_ids"])
            logprobs += m.get("generation_logprobs") or [0.0] * len(m["token_ids"])
        out.append(Sample(tokens, mask, logprobs, float(sample["total_reward"]), i // group_size))
    return out, left_out


def gym_rows(instructions: list[str], samples: int, max_tokens: int, prefix: str) -> list[dict[str, Any]]:
    """The Gym rows of one step as NeMo-RL's GRPO loop hands them to its Gym actor: each task's row repeated
    `samples` times, the repeats together; each task's sessions named `<prefix>-p<i>-...` on our rollout server."""
    rows = []
    for i, instruction in enumerate(instructions):
        for _ in range(samples):
            rows.append(
                {
                    "responses_create_params": {
                        "input": [{"role": "user", "content": instruction}],
                        "max_output_tokens": max_tokens,
                    },
                    "agent_ref": AGENT,
                    "polar": {"task_id": f"{prefix}-p{i}"},
                }
            )
    return rows


def _read_items(result: dict[str, Any]) -> dict[str, Any]:
    """Without NeMo-RL: the Gym items' token fields in order (each prompt extends the tokens before it)."""
    log, seen = [], 0
    for item in result["response"]["output"]:
        if not item.get("generation_token_ids"):
            continue
        prompt = item["prompt_token_ids"]
        log.append({"role": "user", "token_ids": prompt[seen:]})
        generated = item["generation_token_ids"]
        log.append({"role": "assistant", "token_ids": generated, "generation_logprobs": item["generation_log_probs"]})
        seen = len(prompt) + len(generated)
    mask = bool((result.get("instance_config") or {}).get("mask_sample"))
    return {"message_log": log, "total_reward": result["reward"], "mask_sample": mask}
