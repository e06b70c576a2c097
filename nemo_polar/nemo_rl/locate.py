"""NeMo-RL found, not copied: the checkout `NEMO_RL_DIR` names, run in a Python that imports it.

The checkout is `NEMO_RL_DIR` (the same setting `polar launch slurm` uses). Its Python is
`NEMO_RL_PYTHON`, else the checkout's own `.venv` (what `uv sync` makes there), else the CPU
environment `scripts/setup.sh nemo_rl` builds (`.deps/nemo_rl`, enough to import NeMo-RL and run its
config and post-processing code on this machine). `call` runs `worker.py` there: NeMo-RL's code
judges our recipes and our Gym results, in its own process, with JSON across.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, PolarError
from ..paths import DEPS
from .wire import TrainBatch

WORKER = Path(__file__).with_name("worker.py")
HOW = (
    "set NEMO_RL_DIR to a NeMo-RL checkout (and NEMO_RL_PYTHON to a Python that imports it, unless the "
    "checkout has its own .venv); scripts/setup.sh nemo_rl builds a CPU one in .deps/nemo_rl"
)


class NemoRLNotFound(ConfigError):
    """No NeMo-RL checkout, or no Python to run it with."""


class NemoRLFailed(PolarError, RuntimeError):
    """NeMo-RL's code could not run (not: it judged something wrong, which is an answer)."""


class Commands:
    """What NeMo-RL's code is asked, over `call` (a process per call, or one served process)."""

    def call(self, command: str, payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def postprocess(
        self, rows: list[dict], results: list[dict], num_generations: int, tokenizer: str | Path, **options: Any
    ) -> list[dict[str, Any]]:
        """Gym `/run` results as NeMo-RL's Gym rollout loop turns them into training data (worker.py:
        its contiguity check, message logs, reward, mask_sample, reward components and penalties).
        One entry per result, in order: the sample, or `{"error": ...}` where NeMo-RL refused it."""
        return by_result(self._postprocess(rows, results, num_generations, tokenizer, options), len(results))

    def _postprocess(
        self, rows: list[dict], results: list[dict], num_generations: int, tokenizer: str | Path, options: dict
    ) -> dict[str, Any]:
        payload = {"rows": rows, "results": results, "num_generations": num_generations, "tokenizer": str(tokenizer)}
        return self.call("postprocess", payload | options) | {"num_generations": num_generations}

    def grpo_batch(
        self,
        rows: list[dict],
        results: list[dict],
        num_generations: int,
        tokenizer: str | Path,
        recipe: str | Path,
        overrides: list[str] | tuple[str, ...] = (),
        **options: Any,
    ) -> tuple[list[dict[str, Any]], TrainBatch | None]:
        """`postprocess`, and the GRPO training batch NeMo-RL's `grpo_train` builds from those samples under
        `recipe` (its id, input ids, token and sample masks, rewards; None when no group survived). Kept in
        the served process for `grpo_loss`."""
        grpo = {"grpo": {"path": str(recipe), "overrides": list(overrides)}}
        answer = self._postprocess(rows, results, num_generations, tokenizer, options | grpo)
        return by_result(answer, len(results)), answer.get("train")

    def grpo_loss(
        self, batch: int, logprobs: list[list[float]], prev_logprobs: list[list[float]] | None = None
    ) -> dict[str, Any]:
        """NeMo-RL's GRPO advantages and `ClippedPGLossFn` on batch `batch`, given the policy's logprob of
        each next token ([B, S-1]): the loss, its gradient with respect to `logprobs`, the token-level
        advantages (0 outside the loss mask) and NeMo-RL's loss metrics."""
        return self.call("grpo_loss", {"batch": batch, "logprobs": logprobs, "prev_logprobs": prev_logprobs})


def by_result(answer: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """One entry per result, in order: the sample, or `{"error": ...}` where NeMo-RL refused it or its group
    (`answer`: the worker's groups and errors, and the `num_generations` they were grouped by)."""
    num_generations = answer["num_generations"]
    out: list[dict[str, Any] | None] = [None] * count
    for group in answer["groups"]:
        for i, sample in enumerate(group["samples"]):
            out[group["group"] * num_generations + i] = sample
    refused = {error["row"]: error["message"] for error in answer["errors"]}
    for row, message in refused.items():
        out[row] = {"error": message}

    def group_lost(row: int) -> dict[str, Any]:
        """NeMo-RL post-processes a group once all its rows converted: a refused row takes its group with it."""
        first = row - row % num_generations
        why = [f"rollout {r} was refused" for r in range(first, first + num_generations) if r in refused]
        return {"error": f"its group was not post-processed: {', '.join(why) or 'no answer for it'}"}

    return [group_lost(row) if sample is None else sample for row, sample in enumerate(out)]


@dataclass(frozen=True)
class NemoRL(Commands):
    dir: Path
    python: Path

    @property
    def commit(self) -> str | None:
        """The checkout's commit, when it is a git checkout."""
        head = self.dir / ".git" / "HEAD"
        if not head.is_file():
            return None
        ref = head.read_text().strip()
        if not ref.startswith("ref: "):
            return ref
        target = self.dir / ".git" / ref[5:]
        return target.read_text().strip() if target.is_file() else None

    def env(self) -> dict[str, str]:
        """What a process running NeMo-RL's code needs: the checkout on its path, nothing sent home."""
        return os.environ | {
            "NEMO_RL_DIR": str(self.dir),
            "PYTHONPATH": os.pathsep.join(p for p in (str(self.dir), os.environ.get("PYTHONPATH")) if p),
            # nothing written into the checkout (it may be read-only), and the environment's own bytecode, compiled
            # at install, read: a PYTHONPYCACHEPREFIX would hide it, and each start compiled torch, Ray and vLLM
            # from source again (45 s to import NeMo-RL's GRPO module, against 21)
            "PYTHONDONTWRITEBYTECODE": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            "WANDB_MODE": "disabled",
        }

    def call(self, command: str, payload: dict[str, Any], timeout_s: float = 900) -> dict[str, Any]:
        """Run one worker command in NeMo-RL's Python (a process of its own); its JSON answer."""
        done = subprocess.run(
            [str(self.python), str(WORKER), command],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout_s,
            check=False,
        )
        try:
            answer = json.loads(done.stdout)
        except json.JSONDecodeError:
            raise NemoRLFailed(
                f"NeMo-RL ({self.python}) exited {done.returncode} without an answer:\n{done.stderr[-4000:]}"
            ) from None
        return _checked(command, answer)

    def serve(self, *preload: str) -> Served:
        """One NeMo-RL process for many calls (its imports take tens of seconds): `with nemo_rl.serve() as s:`.
        `preload`: NeMo-RL modules to import at start besides post-processing's (e.g. `nemo_rl.algorithms.grpo`)."""
        return Served(self, preload)


def _checked(command: str, answer: dict[str, Any]) -> dict[str, Any]:
    if "failure" in answer:
        raise NemoRLFailed(f"NeMo-RL failed on {command}: {answer['failure']}\n{answer.get('traceback', '')}")
    return answer


class Served(Commands):
    """A worker process kept open: `call` sends one line, reads one line back."""

    def __init__(self, nemo_rl: NemoRL, preload: tuple[str, ...] = ()):
        self.nemo_rl, self.preload = nemo_rl, preload
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Served:
        self.process = subprocess.Popen(
            [str(self.nemo_rl.python), str(WORKER), "serve", *self.preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=self.nemo_rl.env(),
            start_new_session=True,
        )
        return self

    def call(self, command: str, payload: dict[str, Any]) -> dict[str, Any]:
        assert self.process is not None and self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps({"command": command, "payload": payload}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise NemoRLFailed(f"NeMo-RL's worker ({self.nemo_rl.python}) exited with {self.process.wait()}")
        return _checked(command, json.loads(line))

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.stdin.close()  # type: ignore[union-attr]
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
            self.process = None


def _python(checkout: Path) -> Path | None:
    named = os.environ.get("NEMO_RL_PYTHON")
    if named:
        return Path(named)
    for candidate in (checkout / ".venv" / "bin" / "python", DEPS / "nemo_rl" / "bin" / "python"):
        if candidate.exists():
            return candidate
    return None


def locate() -> NemoRL:
    """The NeMo-RL this machine is pointed at, or NemoRLNotFound saying how to point at one."""
    named = os.environ.get("NEMO_RL_DIR")
    if not named:
        raise NemoRLNotFound(f"NeMo-RL not found: NEMO_RL_DIR is not set; {HOW}")
    checkout = Path(named).expanduser().resolve()
    if not (checkout / "nemo_rl" / "__init__.py").is_file():
        raise NemoRLNotFound(f"NeMo-RL not found: {checkout} holds no nemo_rl package; {HOW}")
    python = _python(checkout)
    if python is None or not python.exists():
        raise NemoRLNotFound(f"NeMo-RL at {checkout} has no Python to run it with; {HOW}")
    return NemoRL(checkout, python)
