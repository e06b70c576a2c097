"""Runs inside NeMo-RL's own Python, as a script: NeMo-RL's code judges what nemo_polar hands it.

    python worker.py validate     < {"recipes": [{"path": ..., "overrides": [...]}]}
    python worker.py postprocess  < {"tokenizer": DIR, "rows": [...], "results": [...], ...}
    python worker.py about        < {}
    python worker.py grpo_loss    < {"batch": ID, "logprobs": [[...]]}  (after a postprocess with "grpo")
    python worker.py serve ...    then gym_start, gym_rollouts, gym_stop  (NeMo-RL's own Gym actor; Ray, NeMo Gym)
    python worker.py serve [MODULE ...]  < one {"command": ..., "payload": ...} per line, one answer per line out

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
  reward penalties, the group's input ids). With `"grpo": {"path": RECIPE, "overrides": [...]}` it also
  builds the GRPO training batch from those groups as `grpo_train` does, and keeps it (`train.id`).
- `grpo_loss`: on that batch, NeMo-RL's advantage estimator and `ClippedPGLossFn` as the recipe configures
  them, on the policy logprobs the caller computed; the loss's gradient with respect to them goes back, and
  the caller back-propagates it through its own model. Needs the `serve` process that built the batch.
- `gym_start`, `gym_rollouts`, `gym_stop`: NeMo-RL's own rollout collection, as `grpo_train` runs it. `gym_start`
  starts Ray and NeMo-RL's `NemoGym` actor by its `spinup_nemo_gym_actor` on the recipe's `env.nemo_gym` section
  (Gym's head server and the servers it names, each venv built by Gym); `gym_rollouts` sends a step's rows through
  `run_nemo_gym_rollout_sync` (the actor's `run_rollouts`, its post-processing, each group's) and answers as
  `postprocess` does, the GRPO batch built and kept from NeMo-RL's own final batch. Needs a Python with Ray and
  NeMo Gym beside NeMo-RL (`scripts/setup.sh nemo_rl_gym`).
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
) -> dict[str, Any]:
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
    from nemo_rl.algorithms.loss import ClippedPGLossFn

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
    # the normalisers NeMo-RL's policy workers all-reduce over data-parallel ranks: here, one rank
    valid_seqs = train["sample_mask"].sum()
    valid_toks = (train["token_mask"][:, 1:] * train["sample_mask"].unsqueeze(-1)).sum()
    loss, metrics = ClippedPGLossFn(master.loss_fn)(logprobs, train, valid_seqs, valid_toks)
    loss.backward()
    return {
        "loss": float(loss.detach()),
        "grad": logprobs.grad.tolist(),
        "advantages": (train["advantages"] * mask).tolist(),
        "metrics": {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)},
    }


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
    # grpo_train clears the stop criteria configure_generation_config filled in; the generation's `cfg` (what
    # NeMo-RL reads of its generation interface here: the engine's max_model_len) is that config
    generation = {**master.policy["generation"], "stop_token_ids": None, "stop_strings": None}
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


def gym_stop(payload: dict[str, Any]) -> dict[str, Any]:
    """The actor's own shutdown (Gym's servers stopped), then Ray's."""
    import ray

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
    "gym_start": gym_start,
    "gym_rollouts": gym_rollouts,
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
