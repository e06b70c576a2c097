"""Runs inside NeMo-RL's own Python, as a script: NeMo-RL's code judges what nemo_polar hands it.

    python worker.py validate     < {"recipes": [{"path": ..., "overrides": [...]}]}
    python worker.py postprocess  < {"tokenizer": DIR, "rows": [...], "results": [...], ...}
    python worker.py about        < {}
    python worker.py grpo_loss    < {"batch": ID, "logprobs": [[...]]}  (after a postprocess with "grpo")
    python worker.py clipped_pg_loss < {"loss_fn": {...}, "data": {...}, "logprobs": [[...]]}
    python worker.py serve ...    then gym_start, gym_rollouts, gym_stop  (NeMo-RL's own Gym actor; Ray, NeMo Gym)
    python worker.py serve ...    then gym_start, gym_async_start, gym_async_sample / gym_async_refit, gym_stop
    python worker.py serve [MODULE ...]  < one {"command": ..., "payload": ...} per line, one answer per line out

One JSON object in on stdin, one out on stdout. This file imports the standard library and NeMo-RL
(with what NeMo-RL itself imports) and nothing of nemo_polar, so it runs in any environment that
imports NeMo-RL: a checkout's own `uv` venv, its container, or the CPU environment set-up builds.

- `validate`: a recipe loaded by NeMo-RL's loader (`defaults:` chain, `_override_`), overridden by
  its Hydra override parser, resolved, then validated the way its entry point and its config test
  do: `MasterConfig(**config)`, the vLLM generation section against its `VllmConfig` type (keys
  NeMo-RL reads with `[]` that `MasterConfig` does not type), and the Gym entry point's own set-up
  and assertion (`setup_nemo_gym_config`, `should_use_nemo_gym`); with `grpo.async_grpo.enabled`, the config
  assertions `async_grpo_train` opens with (run by calling it without an engine: it stops before starting anything).
- `postprocess`: Gym `/run` results turned into NeMo-RL's training data by NeMo-RL's own code, as its
  Gym rollout loop does: each result through `NemoGym._postprocess_nemo_gym_to_nemo_rl_result`
  (contiguity assertion, message logs, decoded text), rows regrouped by `_NemoGymStreamAccumulator`,
  each group through `_postprocess_single_nemo_gym_group` (reward, `mask_sample`, reward components,
  reward penalties, the group's input ids). With `"grpo": {"path": RECIPE, "overrides": [...]}` it also
  builds the GRPO training batch from those groups as `grpo_train` does, and keeps it (`train.id`).
- `grpo_loss`: on that batch, NeMo-RL's advantage estimator and `ClippedPGLossFn` as the recipe configures
  them, on the policy logprobs the caller computed; the loss's gradient with respect to them goes back, and
  the caller back-propagates it through its own model. Needs the `serve` process that built the batch.
- `clipped_pg_loss`: `ClippedPGLossFn` alone, under a recipe's `loss_fn` section, on a train dict the caller
  assembled itself (its loss, gradient and metrics, as `grpo_loss` answers them).
- `gym_start`, `gym_rollouts`, `gym_stop`: NeMo-RL's own rollout collection, as `grpo_train` runs it. `gym_start`
  starts Ray and NeMo-RL's `NemoGym` actor by its `spinup_nemo_gym_actor` on the recipe's `env.nemo_gym` section
  (Gym's head server and the servers it names, each venv built by Gym); `gym_rollouts` sends a step's rows through
  `run_nemo_gym_rollout_sync` (the actor's `run_rollouts`, its post-processing, each group's) and answers as
  `postprocess` does, the GRPO batch built and kept from NeMo-RL's own final batch. Needs a Python with Ray and
  NeMo Gym beside NeMo-RL (`scripts/setup.sh nemo_rl_gym`).
- `gym_async_start`, `gym_async_sample`, `gym_async_refit`: NeMo-RL's own asynchronous collection, as
  `async_grpo_train` runs it, on that actor: its `ReplayBuffer` and `AsyncTrajectoryCollector` (which generates ahead
  for the next `max_trajectory_age_steps` weight versions), `replay_buffer.sample` each step (the groups meant for it,
  answered as `gym_rollouts` answers), `prepare_for_refit` before the caller publishes weights and
  `set_weight_version`, `resume_after_refit` after. The recipe needs `grpo.async_grpo.enabled`.
"""

from __future__ import annotations

import functools
import json
import sys
import traceback
import typing
from types import SimpleNamespace
from typing import Any

if sys.version_info < (3, 12):  # pydantic validates TypedDicts only from typing_extensions below 3.12
    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]

if __package__:  # imported from nemo_polar (for its types)
    from .wire import TrainBatch
else:  # run as a script, in NeMo-RL's Python: wire.py sits beside it
    from wire import TrainBatch  # type: ignore[no-redef]


def _errors(exc: Exception, prefix: str = "") -> list[dict[str, str]]:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return [
            {"key": prefix + ".".join(str(p) for p in e["loc"]), "message": f"{e['msg']} ({e['type']})"}
            for e in exc.errors()
        ]
    return [{"key": prefix.rstrip(".") or "<recipe>", "message": f"{type(exc).__name__}: {exc}".strip()}]


def _load(path: str, overrides: list[str]) -> dict[str, Any]:
    """A recipe as NeMo-RL's loader reads it (`defaults:` chain, `_override_`), overridden by its Hydra parser."""
    from nemo_rl.utils.config import load_config, parse_hydra_overrides
    from omegaconf import OmegaConf

    cfg = load_config(path)
    if overrides:
        cfg = parse_hydra_overrides(cfg, overrides)
    return OmegaConf.to_container(cfg, resolve=True)


def validate_one(path: str, overrides: list[str]) -> dict[str, Any]:
    from nemo_rl.algorithms.grpo import MasterConfig
    from nemo_rl.environments.nemo_gym import setup_nemo_gym_config, should_use_nemo_gym
    from nemo_rl.models.generation.vllm.config import VllmConfig, materialize_vllm_video_config
    from nemo_rl.utils.config import register_omegaconf_resolvers
    from pydantic import TypeAdapter, ValidationError

    register_omegaconf_resolvers()
    try:
        config = _load(path, overrides)
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
    if master.grpo.async_grpo.enabled:
        errors += _async_preflight(master)
    return {"path": path, "config": config, "errors": errors}


def _async_preflight(master: Any) -> list[dict[str, str]]:
    """NeMo-RL's `async_grpo_train` itself, up to the point it needs a generation engine: it opens with its config
    assertions (an async generation engine, importance-sampling correction, router replay without the data plane),
    then stops at `assert policy_generation is not None`, before it starts anything (Ray, its replay buffer). What
    cannot run here: its colocation check (which needs the engine object) and the Gym entry point's refusals of
    dynamic sampling, reward scaling and shaping and multiple dataloaders (inline in run_grpo_nemo_gym.py's main,
    after its GPU set-up)."""
    from nemo_rl.algorithms.grpo import async_grpo_train

    unset = dict.fromkeys(("policy", "policy_generation", "dataloader", "val_dataloader", "tokenizer", "loss_fn"))
    unset |= dict.fromkeys(("task_to_env", "val_task_to_env", "logger", "checkpointer", "grpo_save_state"))
    try:
        async_grpo_train(
            **unset, master_config=master, max_trajectory_age_steps=master.grpo.async_grpo.max_trajectory_age_steps
        )
    except AssertionError as exc:
        if traceback.extract_tb(exc.__traceback__)[-1].line == "assert policy_generation is not None":
            return []  # every config assertion before it held
        return _errors(exc, "<async_grpo_train>.")
    except Exception as exc:  # noqa: BLE001 - whatever it raised before its engine check is the recipe's error
        return _errors(exc, "<async_grpo_train>.")
    return [{"key": "<async_grpo_train>", "message": "ran past its engine check without an engine"}]


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


def _entries(done: Any) -> list[dict[str, Any]]:
    """Each sample of a post-processed NeMo-RL rollout result (`NemoGymRolloutResult`), as JSON."""
    batch = done.final_batch
    mask = batch.get("mask_sample")
    return [
        {
            "message_log": _log(log),
            "total_reward": float(batch["total_reward"][i]),
            "mask_sample": bool(mask[i]) if mask is not None else False,
            "length": int(batch["length"][i]),
            "input_ids": [int(t) for t in done.input_ids[i][: int(batch["length"][i])].tolist()],
        }
        for i, log in enumerate(batch["message_log"])
    ]


def _metrics(done: Any) -> dict[str, float]:
    return {k: float(v) for k, v in done.rollout_metrics.items() if isinstance(v, int | float)}


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
    groups, errors, finals = [], [], []
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
        finals.append(done.final_batch)
        samples = _entries(done)
        for sample, result in zip(samples, group.results, strict=True):
            sample["items"] = result["full_result"]["response"]["output"]
        groups.append({"group": group.group_index, "samples": samples, "metrics": _metrics(done)})
    # every chain: each further chain of a rollout (`chains`: its logical row and its own result) is a row of its
    # own by the same function, one chain per call
    extra, refused = [], []
    for chain in payload.get("chains") or []:
        logical = int(chain["logical"])
        try:
            extra.append((logical, to_nemo_rl(actor, rows[logical], chain["result"], tokenizer)["message_log"]))
        except (AssertionError, ValueError) as exc:
            refused.append({"row": logical, "message": f"{type(exc).__name__}: {exc}"[:4000]})
    answer: dict[str, Any] = {"groups": groups, "errors": errors, "chains_refused": refused}
    if payload.get("grpo") and finals:
        order = [g["group"] * num_generations + i for g in groups for i in range(len(g["samples"]))]
        answer["train"] = _train_batch(payload["grpo"], finals, tokenizer, order, extra) | {
            "chains_refused": len(refused)
        }
    return answer


# --- GRPO: the training batch, the advantages and the loss, as NeMo-RL's synchronous GRPO step makes them
# (`grpo_train` in nemo_rl/algorithms/grpo.py), for a trainer whose policy lives in another process: the
# batch goes out as token ids, the policy's logprobs of them come back, and the loss's gradient with
# respect to those logprobs goes out again (the loss depends on the policy only through them).

_MASTERS: dict[str, Any] = {}
_BATCHES: dict[int, dict[str, Any]] = {}  # the last few training batches, by id, until their loss is asked


def _master(recipe: dict[str, Any]) -> Any:
    """The recipe as NeMo-RL's Gym GRPO entry point holds it: loaded, `MasterConfig`, Gym set-up applied."""
    key = json.dumps(recipe, sort_keys=True)
    if key not in _MASTERS:
        from nemo_rl.algorithms.grpo import MasterConfig
        from nemo_rl.environments.nemo_gym import setup_nemo_gym_config
        from nemo_rl.utils.config import register_omegaconf_resolvers

        register_omegaconf_resolvers()
        master = MasterConfig(**_load(recipe["path"], list(recipe.get("overrides") or [])))
        setup_nemo_gym_config(master, None)
        _MASTERS[key] = master
    return _MASTERS[key]


def _train_batch(
    recipe: dict[str, Any], finals: list[Any], tokenizer: Any, order: list[int], extra: list[tuple[int, Any]]
) -> TrainBatch:
    """The post-processed groups as one GRPO training batch, in `grpo_train`'s order: reward scaling and
    shaping, the prompts the advantages group by, overlong filtering, `mask_sample`, the token loss masks,
    the flat batch. `order`: the result index of each row of `finals`; `extra`: (result index, message log) of
    each further chain, a row after the rollouts' own that takes its rollout's loss multiplier (and, in
    `grpo_loss`, its advantage)."""
    import torch
    from nemo_rl.algorithms.grpo import (
        _apply_mask_sample_filter,
        add_grpo_token_loss_masks_and_generation_logprobs,
        extract_initial_prompt_messages,
        scale_rewards,
    )
    from nemo_rl.algorithms.reward_functions import apply_reward_shaping
    from nemo_rl.data.llm_message_utils import batched_message_log_to_flat_message
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict
    from nemo_rl.experience.rollouts import backfill_missing_routed_experts

    master = _master(recipe)
    pad = {"token_ids": tokenizer.pad_token_id}
    batch = BatchedDataDict.from_batches(finals)
    batch = scale_rewards(batch, master.grpo.reward_scaling)
    if master.grpo.reward_shaping.enabled:
        batch = apply_reward_shaping(batch, master.grpo.reward_shaping)
    backfill_missing_routed_experts(batch["message_log"])
    prompts, _ = batched_message_log_to_flat_message(
        extract_initial_prompt_messages(batch["message_log"], batch["length"]), pad_value_dict=pad
    )
    if master.grpo.overlong_filtering:  # grpo_train's own three lines: truncated samples leave the loss
        multiplier = batch["loss_multiplier"].clone()
        multiplier[torch.as_tensor(batch["truncated"], dtype=torch.bool)] = 0
        batch["loss_multiplier"] = multiplier
    _apply_mask_sample_filter(batch)
    position = {result: row for row, result in enumerate(order)}
    extra = [(position[result], log) for result, log in extra if result in position]  # a refused group: none
    if extra and not master.loss_fn.token_level_loss:
        raise ValueError("every chain is trained under a token-level loss only (loss_fn.token_level_loss: true)")
    logs = list(batch["message_log"]) + [log for _, log in extra]
    add_grpo_token_loss_masks_and_generation_logprobs(logs)
    flat, lengths = batched_message_log_to_flat_message(
        logs,
        pad_value_dict=pad,
        make_sequence_length_divisible_by=master.policy["make_sequence_length_divisible_by"],
    )
    index = list(range(len(order))) + [row for row, _ in extra]  # each row's rollout, a row of `batch`
    train = BatchedDataDict(
        {
            "input_ids": flat["token_ids"],
            "input_lengths": lengths,
            "generation_logprobs": flat["generation_logprobs"],
            "token_mask": flat["token_loss_mask"],
            "sample_mask": batch["loss_multiplier"][torch.tensor(index)],
        }
    )
    batch_id = max(_BATCHES, default=0) + 1
    _BATCHES[batch_id] = {
        "recipe": recipe,
        "batch": batch,
        "train": train,
        "prompt_ids": prompts["token_ids"],
        "index": index,
        "logs": logs,
    }
    for old in sorted(_BATCHES)[:-4]:
        del _BATCHES[old]
    return {
        "id": batch_id,
        "input_ids": train["input_ids"].tolist(),
        "token_mask": train["token_mask"].tolist(),
        "generation_logprobs": train["generation_logprobs"].tolist(),  # the behaviour policy's: each call's recorded
        "sample_mask": train["sample_mask"].tolist(),
        "rewards": batch["total_reward"].tolist(),
        "rows": len(index),
        "rollouts": len(order),
    }


def grpo_loss(payload: dict[str, Any]) -> dict[str, Any]:
    """NeMo-RL's GRPO advantages and `ClippedPGLossFn` on a batch `postprocess` built, given the policy's
    logprob of each next token (`logprobs`, [B, S-1], from the weights about to be updated). As in
    `grpo_train`: `prev_logprobs` are those same values (the policy before its step; `prev_logprobs` in the
    payload replaces them) unless the recipe skips them, advantages by the recipe's estimator with its
    message-level penalties and clipping, the loss normalised over the whole batch's valid tokens and
    sequences (one microbatch). Returns the loss, its gradient with respect to `logprobs`, the advantages
    and NeMo-RL's loss metrics."""
    import torch
    from nemo_rl.algorithms.grpo import (
        _apply_configured_message_level_advantage_penalties,
        _clip_grpo_advantages,
        _create_advantage_estimator,
        _resolve_logprob_skip_flags,
        compute_and_apply_seq_logprob_error_masking,
    )

    held = _BATCHES[int(payload["batch"])]
    master, batch, train = _master(held["recipe"]), held["batch"], held["train"].copy()
    logprobs = torch.tensor(payload["logprobs"], dtype=torch.float32, requires_grad=True)
    policy = torch.nn.functional.pad(logprobs.detach(), (1, 0))  # NeMo-RL's get_logprobs: [B, S], 0 first
    skip_prev, skip_reference = _resolve_logprob_skip_flags(master)
    if payload.get("prev_logprobs") is not None:
        policy = torch.nn.functional.pad(torch.tensor(payload["prev_logprobs"], dtype=torch.float32), (1, 0))
    train["prev_logprobs"] = torch.zeros_like(train["generation_logprobs"]) if skip_prev else policy
    if not skip_reference:
        raise ValueError("the recipe asks for reference-policy logprobs, which this trainer does not compute")
    train["reference_policy_logprobs"] = torch.zeros_like(train["prev_logprobs"])
    index, rollouts = held["index"], len(batch["message_log"])
    rewards = batch["total_reward"]
    if not skip_prev:
        compute_and_apply_seq_logprob_error_masking(
            train_data=train,
            rewards=rewards[torch.tensor(index)],
            seq_logprob_error_threshold=master.grpo.seq_logprob_error_threshold,
        )
    mask = train["token_mask"] * train["sample_mask"].unsqueeze(-1)
    # the advantages of the rollouts (the first rows), within their task's group; each further chain's row
    # takes its rollout's, so a chain adds no reward vote and never forms a group of its own
    advantages = _create_advantage_estimator(master).compute_advantage(
        prompt_ids=held["prompt_ids"],
        rewards=rewards,
        mask=mask[:rollouts],
        repeated_batch=batch,
        logprobs_policy=train["prev_logprobs"][:rollouts],
        logprobs_reference=train["reference_policy_logprobs"][:rollouts],
    )
    train["advantages"] = torch.cat([advantages, _per_rollout(advantages, mask, index[rollouts:])])
    _apply_configured_message_level_advantage_penalties(train, held["logs"], master)
    train["advantages"] = _clip_grpo_advantages(train["advantages"], master.grpo)
    return _clipped_pg(master.loss_fn, logprobs, train) | {"advantages": (train["advantages"] * mask).tolist()}


def _clipped_pg(loss_fn: Any, logprobs: Any, train: Any) -> dict[str, Any]:
    """NeMo-RL's `ClippedPGLossFn` under `loss_fn` on `train`, one microbatch: the loss, its gradient with respect to
    `logprobs` ([B, S-1], requiring grad) and NeMo-RL's loss metrics."""
    from nemo_rl.algorithms.loss import ClippedPGLossFn

    # the normalisers NeMo-RL's policy workers all-reduce over data-parallel ranks: here, one rank
    valid_seqs = train["sample_mask"].sum()
    valid_toks = (train["token_mask"][:, 1:] * train["sample_mask"].unsqueeze(-1)).sum()
    loss, metrics = ClippedPGLossFn(loss_fn)(logprobs, train, valid_seqs, valid_toks)
    loss.backward()
    return {
        "loss": float(loss.detach()),
        "grad": logprobs.grad.tolist(),
        "metrics": {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)},
    }


def clipped_pg_loss(payload: dict[str, Any]) -> dict[str, Any]:
    """NeMo-RL's `ClippedPGLossFn` alone, on a train dict the caller assembled (`data`: token_mask, sample_mask,
    advantages, generation_logprobs, prev_logprobs, reference_policy_logprobs, as [B, S] lists, sample_mask [B]),
    under `loss_fn` (a recipe's section, read by NeMo-RL's `ClippedPGLossConfig`), given the policy's next-token
    `logprobs` ([B, S-1]); answered as `grpo_loss` (its loss, gradient and metrics)."""
    import torch
    from nemo_rl.algorithms.loss import ClippedPGLossConfig
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    train = BatchedDataDict({k: torch.tensor(v, dtype=torch.float32) for k, v in payload["data"].items()})
    logprobs = torch.tensor(payload["logprobs"], dtype=torch.float32, requires_grad=True)
    return _clipped_pg(ClippedPGLossConfig(**payload["loss_fn"]), logprobs, train)


def _per_rollout(advantages: Any, mask: Any, rows: list[int]) -> Any:
    """[len(rows), S]: for each further chain, its rollout's advantage (one value per rollout, as GRPO gives)."""
    import torch

    out = torch.zeros(len(rows), mask.shape[1], dtype=advantages.dtype)
    for k, row in enumerate(rows):
        values = advantages[row][mask[row] > 0]
        if values.numel() and float(values.max() - values.min()) > 1e-6:
            raise ValueError("every chain takes one advantage per rollout; this estimator gives per-token ones")
        out[k] = float(values[0]) if values.numel() else 0.0
    return out


# --- NeMo-RL's own rollout collection: its Gym actor, started and driven as `grpo_train` does (nemo_rl/algorithms/
# grpo.py: `spinup_nemo_gym_actor` in its set-up, `run_nemo_gym_rollout_sync` each step).

_GYM: dict[str, Any] = {}  # the actor, the tokenizer it holds, the recipe it runs, the env section it got


def gym_start(payload: dict[str, Any]) -> dict[str, Any]:
    """Ray on this machine and NeMo-RL's `NemoGym` actor on the recipe's `env.nemo_gym`, with `nemo_gym` ({dotted key:
    value} set over it, each value replacing what was there: where our rollout server is, the task defaults) and
    `environment` (what Gym's servers read: set in this process, whose environment the actor takes), against
    `base_urls` serving `model_name`."""
    import os

    import ray
    from nemo_rl.algorithms.utils import get_tokenizer
    from nemo_rl.environments.nemo_gym import spinup_nemo_gym_actor
    from omegaconf import OmegaConf

    if _GYM:
        raise RuntimeError("NeMo-RL's Gym actor is already running in this worker")
    master = _master(payload["grpo"])
    os.environ.update(payload.get("environment") or {})
    env, section = dict(master.env), OmegaConf.create(master.env["nemo_gym"])
    for key, value in (payload.get("nemo_gym") or {}).items():
        OmegaConf.update(section, key, value, merge=False)
    env["nemo_gym"] = OmegaConf.to_container(section)
    # a Ray of this worker's own ("local"): never one another process on the machine started (ray start, a test's)
    ray.init(address="local", num_cpus=int(payload.get("num_cpus", 4)), include_dashboard=False, log_to_driver=False)
    tokenizer = get_tokenizer({"name": payload["tokenizer"]})
    actor = spinup_nemo_gym_actor(
        env_configs=env,
        base_urls=list(payload["base_urls"]),
        model_name=payload["model_name"],
        tokenizer=tokenizer,
        enable_router_replay=False,
        routed_experts_dtype="int16",  # grpo_train's value without router replay
        use_fastokens=bool(master.policy["tokenizer"].get("use_fastokens")),
    )
    _GYM.update(actor=actor, tokenizer=tokenizer, recipe=payload["grpo"], env=env)
    host, port = ray.get(actor.__ray_call__.remote(lambda self: (self.node_ip, self.head_server_port)))
    return {
        "ray": ray.get_runtime_context().gcs_address,
        "python": sys.executable,
        "head_server": f"http://{host}:{port}",
    }


def gym_rollouts(payload: dict[str, Any]) -> dict[str, Any]:
    """A step's Gym `rows` (each repeated `num_generations` times, a group's repeats together) through NeMo-RL's
    `run_nemo_gym_rollout_sync` with the arguments `grpo_train` passes; answered as `postprocess` answers, with the
    GRPO training batch built from NeMo-RL's own final batch."""
    import torch
    from nemo_rl.algorithms.grpo import _get_effort_config
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict
    from nemo_rl.experience.rollouts import (
        get_nemo_gym_thinking_tags,
        run_nemo_gym_rollout_sync,
        should_mask_flagged_samples,
    )

    if not _GYM:
        raise RuntimeError("gym_start first: NeMo-RL's Gym actor is not running")
    master = _master(_GYM["recipe"])
    rows, size = payload["rows"], int(payload["num_generations"])
    generation = _generation(master)
    batch = BatchedDataDict({"extra_env_info": rows, "loss_multiplier": torch.ones(len(rows))})
    collect = functools.partial(
        run_nemo_gym_rollout_sync,
        policy_generation=SimpleNamespace(cfg=generation),
        input_batch=batch,
        tokenizer=_GYM["tokenizer"],
        task_to_env={"nemo_gym": _GYM["actor"]},
        max_seq_len=master.policy["max_total_sequence_length"],
        generation_config=generation,
        log_full_result_tables=False,
        max_rollout_turns=None,
        greedy=False,
        effort_config=_get_effort_config(master),
        reward_penalty_config=master.reward_penalties,
        thinking_tags=get_nemo_gym_thinking_tags(_GYM["env"]),
        mask_env_flagged_samples=should_mask_flagged_samples(_GYM["env"]),
    )
    done = _watched(collect, float(payload.get("health_check_s", 5)))
    samples = _entries(done)
    groups = [{"group": g, "samples": samples[g * size : (g + 1) * size]} for g in range(len(samples) // size)]
    answer: dict[str, Any] = {"groups": groups, "errors": [], "chains_refused": [], "metrics": _metrics(done)}
    order = list(range(len(samples)))
    answer["train"] = _train_batch(_GYM["recipe"], [done.final_batch], _GYM["tokenizer"], order, [])
    answer["train"]["chains_refused"] = 0
    return answer


def _generation(master: Any) -> dict[str, Any]:
    """The generation config as NeMo-RL's Gym collection uses it: grpo_train clears the stop criteria
    configure_generation_config filled in; as the generation interface's `cfg` it is all NeMo-RL reads of the
    engine here (its max_model_len)."""
    return {**master.policy["generation"], "stop_token_ids": None, "stop_strings": None}


def _watched(collect: Any, every_s: float) -> Any:
    """`collect()` in a thread while the actor's own health check (Gym's `RunHelper.poll`, which names a server
    process that exited) runs every `every_s`: a Gym server that dies mid-step fails the step, saying which, where
    NeMo-RL's synchronous collection would wait forever (Gym's transport retries a refused connection without end).
    The collection left behind holds nothing but its thread; the actor is stopped with the run."""
    import threading

    import ray

    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["done"] = collect()
        except BaseException as exc:  # noqa: BLE001 - raised again below, in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="nemo-rl-rollouts", daemon=True)
    thread.start()
    while True:
        thread.join(every_s)
        if not thread.is_alive():
            break
        ray.get(_GYM["actor"].health_check.remote())
    if "error" in box:
        raise box["error"]
    return box["done"]


# --- NeMo-RL's own asynchronous collection, driven as `async_grpo_train` drives it (grpo.py): its `ReplayBuffer` and
# `AsyncTrajectoryCollector` actors over the Gym actor `gym_start` started; the trainer is the caller.


def gym_async_start(payload: dict[str, Any]) -> dict[str, Any]:
    """The replay buffer (sized as `async_grpo_train` sizes it) and the trajectory collector on the Gym actor, then
    weight version 0 and `start_collection` on `batches` (the dataloader: a list of steps' un-repeated Gym rows, each
    `grpo.num_prompts_per_step` long; the collector repeats each row `num_generations_per_prompt` times)."""
    import ray
    import torch
    from nemo_rl.algorithms.async_utils import AsyncTrajectoryCollector, ReplayBuffer
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    if not _GYM:
        raise RuntimeError("gym_start first: NeMo-RL's Gym actor is not running")
    if "collector" in _GYM:
        raise RuntimeError("NeMo-RL's trajectory collector is already running in this worker")
    master = _master(_GYM["recipe"])
    if not master.grpo.async_grpo.enabled:
        raise ValueError("the recipe's grpo.async_grpo.enabled is false: NeMo-RL collects asynchronously only with it")
    late_arrival_slack = 2  # async_grpo_train's
    size = master.grpo.num_prompts_per_step * master.grpo.async_grpo.max_trajectory_age_steps * late_arrival_slack
    # both actors run in this worker's Python (Ray's default: the driver's), as the Gym actor does
    buffer = ReplayBuffer.remote(max_size=size, drop_incomplete_targets_on_restore=False)
    collector = AsyncTrajectoryCollector.remote(
        policy_generation=SimpleNamespace(cfg=_generation(master)),
        tokenizer=_GYM["tokenizer"],
        task_to_env={"nemo_gym": _GYM["actor"]},
        master_config=master,
        replay_buffer=buffer,
        start_step=0,
    )
    _GYM.update(buffer=buffer, collector=collector)
    batches = [
        BatchedDataDict({"extra_env_info": rows, "loss_multiplier": torch.ones(len(rows))})
        for rows in payload["batches"]
    ]
    ray.get(collector.set_weight_version.remote(0))
    collector.start_collection.remote(batches)
    return {"buffer_size": size, "batches": len(batches)}


def _take(buffer: Any, groups: int, step: int, max_age: int) -> dict[str, Any] | None:
    """`ReplayBuffer.sample` in the buffer's actor, with each sampled group's generation weight version (which it
    holds beside the group but does not return): the actor runs one call at a time, so nothing lands in between."""
    version = {id(t): v for t, v in zip(buffer.trajectories, buffer.trajectory_versions, strict=True)}
    sampled = buffer.sample(num_prompt_groups=groups, current_weight_version=step, max_age_steps=max_age)
    if sampled is not None:
        sampled["generation_versions"] = [version[id(t)] for t in sampled["trajectories"]]
    return sampled


def gym_async_sample(payload: dict[str, Any]) -> dict[str, Any]:
    """One `replay_buffer.sample` for training step `step`, as `async_grpo_train` asks each step (after the
    collector's health check): `{"ready": false, ...}` until `num_prompts_per_step` groups meant for this step are in,
    else the groups answered as `gym_rollouts` answers (each with its Gym task index and generation weight version),
    the GRPO training batch built from their final batches, and NeMo-RL's average trajectory age."""
    import ray
    from nemo_rl.experience.interfaces import NEMO_GYM_TASK_INDEX_KEY

    if "collector" not in _GYM:
        raise RuntimeError("gym_async_start first: NeMo-RL's trajectory collector is not running")
    master = _master(_GYM["recipe"])
    collector, buffer = _GYM["collector"], _GYM["buffer"]
    ray.get(collector.check_health.remote())  # a batch worker's fatal failure, raised here
    groups, age = master.grpo.num_prompts_per_step, master.grpo.async_grpo.max_trajectory_age_steps
    sampled = ray.get(buffer.__ray_call__.remote(_take, groups, int(payload["step"]), age))
    if sampled is None:
        status = ray.get(collector.get_status.remote())
        if status["errored"] or status["data_exhausted"]:
            raise RuntimeError(f"NeMo-RL's trajectory collector stopped: {status}")
        return {"ready": False, "status": status, "buffered": ray.get(buffer.size.remote())}
    answer: dict[str, Any] = {"ready": True, "groups": [], "errors": [], "chains_refused": []}
    versions = sampled["generation_versions"]
    for g, (trajectory, version) in enumerate(zip(sampled["trajectories"], versions, strict=True)):
        batch = trajectory["batch"]
        # as a rollout result: `_entries` reads each sample's prompt from its input ids, the first message of its log
        prompts = [log[0]["token_ids"] for log in batch["message_log"]]
        done = SimpleNamespace(final_batch=batch, input_ids=prompts, rollout_metrics=trajectory["rollout_metrics"])
        answer["groups"].append(
            {
                "group": g,
                "samples": _entries(done),
                "task_index": trajectory.get(NEMO_GYM_TASK_INDEX_KEY),
                "generation_version": int(version),
                "metrics": _metrics(done),
            }
        )
    finals = [t["batch"] for t in sampled["trajectories"]]
    order = list(range(sum(len(g["samples"]) for g in answer["groups"])))
    answer["train"] = _train_batch(_GYM["recipe"], finals, _GYM["tokenizer"], order, []) | {"chains_refused": 0}
    answer["avg_trajectory_age"] = float(sampled["avg_trajectory_age"])
    return answer


def gym_async_refit(payload: dict[str, Any]) -> dict[str, Any]:
    """Around the caller's weight publish, as `async_grpo_train` around its refit: `prepare` (the collector's
    `prepare_for_refit`: no new generation starts; with in-flight weight updates it does not wait for those running),
    then `done` with the new `version` (`set_weight_version`, `resume_after_refit`)."""
    import ray

    collector = _GYM["collector"]
    if payload["phase"] == "prepare":
        ray.get(collector.prepare_for_refit.remote())
    elif payload["phase"] == "done":
        ray.get(collector.set_weight_version.remote(int(payload["version"])))
        ray.get(collector.resume_after_refit.remote())
    else:
        raise ValueError(f"phase: prepare or done, not {payload['phase']!r}")
    return {"phase": payload["phase"]}


def gym_stop(payload: dict[str, Any]) -> dict[str, Any]:
    """The trajectory collector and replay buffer killed (as `async_grpo_train` ends), the Gym actor's own shutdown
    (Gym's servers stopped), then Ray's."""
    import ray

    for name in ("collector", "buffer"):
        if name in _GYM:
            ray.kill(_GYM.pop(name))
    if _GYM:
        try:
            ray.get(_GYM["actor"].shutdown.remote(), timeout=float(payload.get("timeout_s", 60)))
        finally:
            _GYM.clear()
            ray.shutdown()
    return {"stopped": True}


def about(payload: dict[str, Any]) -> dict[str, Any]:
    import nemo_rl

    return {"version": getattr(nemo_rl, "__version__", None), "file": nemo_rl.__file__, "python": sys.version}


COMMANDS = {
    "validate": validate,
    "postprocess": postprocess,
    "grpo_loss": grpo_loss,
    "clipped_pg_loss": clipped_pg_loss,
    "gym_start": gym_start,
    "gym_rollouts": gym_rollouts,
    "gym_async_start": gym_async_start,
    "gym_async_sample": gym_async_sample,
    "gym_async_refit": gym_async_refit,
    "gym_stop": gym_stop,
    "about": about,
}


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
    import importlib

    import nemo_rl.environments.nemo_gym  # noqa: F401
    import nemo_rl.experience.rollouts  # noqa: F401

    for module in sys.argv[2:]:  # what the caller will ask for besides post-processing
        importlib.import_module(module)

    try:
        for line in sys.stdin:
            request = json.loads(line)
            answer.write(json.dumps(run(request["command"], request["payload"])) + "\n")
            answer.flush()
    finally:  # the caller closed our stdin, or went away: an actor left running holds Ray and Gym's servers
        if _GYM:
            run("gym_stop", {})
    return 0


if __name__ == "__main__":
    sys.exit(main())
