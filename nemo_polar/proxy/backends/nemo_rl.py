"""NeMo-RL's vLLM HTTP server (the one its GRPO loop serves the policy with).

It returns `prompt_token_ids`, `generation_token_ids` and `generation_log_probs` on the choice's
message, and reuses those exact tokens when they come back on an assistant message of a later
request (it splices the generated tokens instead of re-templating them). Harnesses drop the
fields, so we re-attach them from the session's own turns. The server also asserts that
(temperature, top_p) is exactly the trainer's pair, top_p explicitly set, and top_k unset: the pair
is pinned from configuration, whatever the harness asked.
"""

from __future__ import annotations

from typing import Any

from ...chat import ChatRequest, as_list
from ...errors import UpstreamError
from ..splice import SpliceIndex
from .base import Backend, message_body

TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")


class NemoRLBackend(Backend):
    engine = "nemo_rl"
    streams = False  # the server answers whole turns; the proxy still streams to the harness
    lists_models = False  # no /v1/models: the name comes from configuration or the session
    splices = True

    def __init__(self, sampling: dict[str, Any] | None = None):
        sampling = dict(sampling or {})
        sampling.setdefault("temperature", 1.0)
        sampling.setdefault("top_p", 1.0)
        super().__init__(sampling)

    def training_fields(self) -> dict[str, Any]:
        return {"logprobs": True, "top_logprobs": 0, "n": 1}

    def build_body(self, req: ChatRequest, splices: SpliceIndex | None, model: str) -> dict[str, Any]:
        body = super().build_body(req, splices, model)
        body.pop("top_k", None)
        return body

    def explain(self, error: UpstreamError, body: dict[str, Any] | None) -> UpstreamError:
        # the server's checks are assertions: a request they refuse is a bare HTTP 500
        if not str(error).startswith("upstream failed with HTTP 500") or body is None:
            return error
        sent = f"temperature={body.get('temperature')}, top_p={body.get('top_p')}"
        return UpstreamError(
            f"{error}. NeMo-RL's server fails every request whose (temperature, top_p) is neither its train nor "
            f"its validation pair (policy.generation), or that sets top_k; this proxy sent {sent} "
            "(upstream.sampling: keep it equal to the recipe's)",
            status_code=error.status_code,
        )

    def messages(self, req: ChatRequest, splices: SpliceIndex | None) -> list[dict[str, Any]]:
        out = []
        for m in req.messages:
            d = dict(message_body(m))  # its own: the spliced fields are this call's
            turn = splices.lookup(m) if splices is not None else None
            if turn is not None:
                d["prompt_token_ids"] = as_list(turn.prompt_token_ids)
                d["generation_token_ids"] = turn.completion_token_ids
                d["generation_log_probs"] = turn.completion_logprobs
            out.append(d)
        return out

    def prompt_ids(self, body: dict[str, Any], choice: dict[str, Any]) -> list[int] | None:
        return (choice.get("message") or {}).get("prompt_token_ids")

    def completion_tokens(self, choice: dict[str, Any]) -> tuple[list[int], list[float]] | None:
        msg = choice.get("message") or {}
        if msg.get("generation_token_ids") is None or msg.get("generation_log_probs") is None:
            return None
        return list(msg["generation_token_ids"]), [float(x) for x in msg["generation_log_probs"]]
