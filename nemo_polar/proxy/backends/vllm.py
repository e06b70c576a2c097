"""vLLM's OpenAI server: `return_token_ids` gives prompt and completion ids, `logprobs` with
`top_logprobs: 0` gives one logprob per sampled token (vLLM fills `logprobs.content` only when
top_logprobs is set)."""

from __future__ import annotations

from typing import Any

from .base import Backend


class VLLMBackend(Backend):
    engine = "vllm"

    def training_fields(self) -> dict[str, Any]:
        return {"logprobs": True, "top_logprobs": 0, "return_token_ids": True}
