"""Inference engines by name."""

from .base import Backend
from .nemo_rl import NemoRLBackend
from .sglang import SGLangBackend
from .vllm import VLLMBackend

BACKENDS: dict[str, type[Backend]] = {b.engine: b for b in (VLLMBackend, SGLangBackend, NemoRLBackend)}

__all__ = ["BACKENDS", "Backend"]
