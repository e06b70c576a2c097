"""NeMo-RL's own vLLM HTTP server on a model folder, started, checked and stopped as our own vLLM is
(`local/vllm_server.py`): in its own process group, from NeMo-RL's vLLM environment (`scripts/setup.sh
nemo_rl_vllm`: the vLLM NeMo-RL pins), running `http_server.py` over the checkout `locate()` found."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..local.vllm_server import VLLMServer
from ..paths import DEPS
from .locate import NemoRL, locate

NEMO_RL_VLLM_PYTHON = DEPS / "nemo_rl_vllm" / "bin" / "python"
SCRIPT = Path(__file__).with_name("http_server.py")


@dataclass
class NemoRLServer(VLLMServer):
    """The server NeMo-RL's generation worker exposes to Gym agents. It asserts every request's (temperature,
    top_p) against `sampling` (its train pair; `val_temperature`/`val_top_p` its validation pair, else the
    same), lists no models and does not stream; it reloads weights in place like vLLM's dev mode."""

    python: Path = NEMO_RL_VLLM_PYTHON
    sampling: dict[str, Any] = field(default_factory=dict)
    nemo_rl: NemoRL | None = None  # None: locate() at start
    what = "NeMo-RL's vLLM server"
    setup_part = "nemo_rl_vllm"

    def command(self) -> list[str]:
        sampling = ["--sampling", json.dumps(self.sampling)]
        return [str(self.python), str(SCRIPT), *self.serving_args(), *sampling, *self.extra_args]

    def environment(self, cache: str) -> dict[str, str]:
        if self.nemo_rl is None:
            self.nemo_rl = locate()
        # as NeMo-RL's generation worker sets it (vllm_worker.py): the engine in the server's own process
        return super().environment(cache) | self.nemo_rl.env() | {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def local_server(engine: str, sampling: dict[str, Any] | None = None, **options: Any) -> VLLMServer:
    """The server this machine starts for the proxy's `upstream.engine`: vLLM, or NeMo-RL's over its pinned vLLM
    (asserting `sampling`, the pair the proxy pins)."""
    if engine == "nemo_rl":
        return NemoRLServer(sampling=dict(sampling or {}), **options)
    if engine != "vllm":
        raise ValueError(f"upstream.engine={engine}: this machine starts vllm or nemo_rl; name a running server's URL")
    return VLLMServer(**options)
