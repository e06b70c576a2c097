"""SGLang's OpenAI server: `return_prompt_token_ids` puts the prompt ids on the choice, and
`return_meta_info` adds `meta_info.output_token_logprobs` as (logprob, token_id, text) triples,
which survive even where the OpenAI-style logprobs are truncated."""

from __future__ import annotations

from typing import Any

from .base import Backend


class SGLangBackend(Backend):
    engine = "sglang"

    def training_fields(self) -> dict[str, Any]:
        return {"logprobs": True, "top_logprobs": 0, "return_prompt_token_ids": True, "return_meta_info": True}

    def prompt_ids(self, body: dict[str, Any], choice: dict[str, Any]) -> list[int] | None:
        return choice.get("prompt_token_ids") or body.get("prompt_token_ids")

    def completion_tokens(self, choice: dict[str, Any]) -> tuple[list[int], list[float]] | None:
        triples = (choice.get("meta_info") or {}).get("output_token_logprobs")
        if triples is not None:
            return [int(t[1]) for t in triples], [float(t[0]) for t in triples]
        return super().completion_tokens(choice)
