"""Runs inside NeMo-RL's own Python, as a script: NeMo-RL's code judges what nemo_polar hands it.

    python worker.py validate     < {"recipes": [{"path": ..., "overrides": [...]}]}
    python worker.py postprocess  < {"tokenizer": DIR, "rows": [...], "results": [...], ...}
    python worker.py about        < {}
    python worker.py serve        < one {"command": ..., "payload": ...} per line, one answer per line out

One JSON object in on stdin, one out on stdout. This file imports the standard library and NeMo-RL
(with what NeMo-RL itself imports) and nothing of nemo_polar, so it runs in any environment that
imports NeMo-RL: a checkout's own `uv` venv, its container, or the CPU environment set-up builds.

- `validate`: a recipe loaded by NeMo-RL's loader (`defaults:` chain, `_override_`), overridden by
  its Hydra override parser, resolved, then validated the way its entry point and its config test
  do: `MasterConfig(**config)`, the vLLM generation section against its `VllmConfig` type (keys
  NeMo-RL reads with `[]` that `MasterConfig` does not type), and the Gym entry point's own set-up
  and assertion (`setup_nemo_gym_config`, `should_use_nemo_gym`).
- `postprocess`: Gym `/run` results turned into NeMo-RL's training data by NeMo-RL's own code, as its
  Gym rollout loop does: each result through `NemoGym._postprocess_nemo_gym_to_nemo_rl_result`
  (contiguity assertion, message logs, decoded text), rows regrouped by `_NemoGymStreamAccumulator`,
  each group through `_postprocess_single_nemo_gym_group` (reward, `mask_sample`, reward components,
  reward penalties, the group's input ids).
"""

from __future__ import annotations

import json
import sys
import traceback
import typing
from types import SimpleNamespace
from typing import Any

if sys.version_info < (3, 12):  # pydantic validates TypedDicts only from typing_extensions below 3.12
    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]


def _errors(exc: Exception, prefix: str = "") -> list[dict[str, str]]:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return [
            {"key": prefix + ".".join(str(p) for p in e["loc"]), "message": f"{e['msg']} ({e['type']})"}
            for e in exc.errors()
        ]
    return [{"key": prefix.rstrip(".") or "<recipe>", "message": f"{type(exc).__name__}: {exc}".strip()}]


def validate_one(path: str, overrides: list[str]) -> dict[str, Any]:
    from nemo_rl.algorithms.grpo import MasterConfig
    from nemo_rl.environments.nemo_gym import setup_nemo_gym_config, should_use_nemo_gym
    from nemo_rl.models.generation.vllm.config import VllmConfig, materialize_vllm_video_config
    from nemo_rl.utils.config import load_config, parse_hydra_overrides, register_omegaconf_resolvers
    from omegaconf import OmegaConf
    from pydantic import TypeAdapter, ValidationError

    register_omegaconf_resolvers()
    try:
        cfg = load_config(path)
        if overrides:
            cfg = parse_hydra_overrides(cfg, overrides)
        config = OmegaConf.to_container(cfg, resolve=True)
    except Exception as exc:  # noqa: BLE001 - NeMo-RL's loader raises many kinds; each is the recipe's error
        return {"path": path, "config": None, "errors": _errors(exc)}
    errors: list[dict[str, str]] = []
    try:
        master = MasterConfig(**config)
    except ValidationError as exc:
        return {"path": path, "config": config, "errors": _errors(exc)}
    generation = master.policy.get("generation") or {}
    if generation.get("backend") == "vllm":
        try:
            TypeAdapter(VllmConfig).validate_python(generation)
        except ValidationError as exc:
            errors += _errors(exc, "policy.generation.")
    try:  # what run_grpo_nemo_gym.py does once the config is materialised
        materialize_vllm_video_config(master.policy, master.data)
        setup_nemo_gym_config(master, None)
        if not should_use_nemo_gym(master):
            errors.append({"key": "env.should_use_nemo_gym", "message": "false: the Gym entry point asserts it"})
    except Exception as exc:  # noqa: BLE001 - the entry point's assertions and KeyErrors
        errors += _errors(exc, "<entry point>.")
    return {"path": path, "config": config, "errors": errors}


def validate(payload: dict[str, Any]) -> dict[str, Any]:
    return {"recipes": [validate_one(r["path"], list(r.get("overrides") or [])) for r in payload["recipes"]]}


def _log(message_log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in message_log:
        entry = {"role": m["role"], "token_ids": [int(t) for t in m["token_ids"].tolist()]}
        if "generation_logprobs" in m:
            entry["generation_logprobs"] = [float(x) for x in m["generation_logprobs"].tolist()]
        out.append(entry)
    return out


def postprocess(payload: dict[str, Any]) -> dict[str, Any]:
    import torch
    from nemo_rl.algorithms.utils import get_tokenizer
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict
    from nemo_rl.environments.nemo_gym import NemoGym
    from nemo_rl.experience.rollouts import _NemoGymStreamAccumulator, _postprocess_single_nemo_gym_group
    from nemo_rl.utils.timer import Timer

    tokenizer = get_tokenizer({"name": payload["tokenizer"]})
    rows, results = payload["rows"], payload["results"]
    num_generations = int(payload["num_generations"])
    env = payload.get("env") or {}
    # the Ray actor's method, called on a stand-in for its instance (as NeMo-RL's own unit tests do)
    to_nemo_rl = NemoGym.__ray_metadata__.modified_class._postprocess_nemo_gym_to_nemo_rl_result
    actor = SimpleNamespace(cfg=env.get("nemo_gym") or {})
    generation = SimpleNamespace(cfg={"vllm_cfg": {"max_model_len": int(payload.get("max_model_len", 32768))}})
    accumulator = _NemoGymStreamAccumulator(rows, num_generations, allow_mixed_agents=False)
    groups, errors = [], []
    for index, (row, result) in enumerate(zip(rows, results, strict=True)):
        try:
            converted = to_nemo_rl(actor, row, result, tokenizer)
        except (AssertionError, ValueError) as exc:  # e.g. "Non-contiguous messages found!"
            errors.append({"row": index, "message": f"{type(exc).__name__}: {exc}"[:4000]})
            continue
        group = accumulator.add(index, converted)
        if group is None:
            continue
        try:
            done = _postprocess_single_nemo_gym_group(
                nemo_gym_rows=group.rows,
                results=group.results,
                timer=Timer(),
                timer_prefix="polar",
                policy_generation=generation,
                input_batch=BatchedDataDict({"loss_multiplier": torch.ones(len(group.rows))}),
                tokenizer=tokenizer,
                log_full_result_tables=False,
                reward_penalty_config=payload.get("reward_penalties"),
                mask_env_flagged_samples=env.get("should_mask_flagged_samples") is not False,
            )
        except (AssertionError, ValueError) as exc:  # e.g. reward components that do not sum to the reward
            first = group.group_index * num_generations
            for row in range(first, first + num_generations):
                errors.append({"row": row, "message": f"{type(exc).__name__}: {exc}"[:4000]})
            continue
        batch = done.final_batch
        mask = batch.get("mask_sample")
        groups.append(
            {
                "group": group.group_index,
                "samples": [
                    {
                        "message_log": _log(log),
                        "total_reward": float(batch["total_reward"][i]),
                        "mask_sample": bool(mask[i]) if mask is not None else False,
                        "length": int(batch["length"][i]),
                        "input_ids": [int(t) for t in done.input_ids[i][: int(batch["length"][i])].tolist()],
                        "items": group.results[i]["full_result"]["response"]["output"],
                    }
                    for i, log in enumerate(batch["message_log"])
                ],
                "metrics": {k: float(v) for k, v in done.rollout_metrics.items() if isinstance(v, int | float)},
            }
        )
    return {"groups": groups, "errors": errors}


def about(payload: dict[str, Any]) -> dict[str, Any]:
    import nemo_rl

    return {"version": getattr(nemo_rl, "__version__", None), "file": nemo_rl.__file__, "python": sys.version}


COMMANDS = {"validate": validate, "postprocess": postprocess, "about": about}


def run(command: str, payload: dict[str, Any]) -> dict[str, Any]:
    try:
        return COMMANDS[command](payload)
    except Exception as exc:  # noqa: BLE001 - reported to the caller whole
        return {"failure": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-8000:]}


def main() -> int:
    answer, sys.stdout = sys.stdout, sys.stderr  # whatever NeMo-RL prints stays out of the answers
    if sys.argv[1] != "serve":
        json.dump(run(sys.argv[1], json.load(sys.stdin)), answer)
        return 0
    # `serve`: one {"command", "payload"} per line in, one answer per line out, NeMo-RL imported once,
    # at start, while the caller does something else
    import nemo_rl.environments.nemo_gym  # noqa: F401
    import nemo_rl.experience.rollouts  # noqa: F401

    for line in sys.stdin:
        request = json.loads(line)
        answer.write(json.dumps(run(request["command"], request["payload"])) + "\n")
        answer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
