"""Recognise the assistant turns a harness sends back, so their exact tokens can be re-attached.

Harnesses drop every field they do not know, so an assistant message comes back as text and tool
calls only. The index maps a fingerprint of what the harness can keep (text, tool names, tool
arguments as parsed JSON) to the tokens the engine produced for it. Reasoning is left out of the
fingerprint: several harnesses drop it from history.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from ..chat import Completion, Message
from ..session_cache import ids_bytes


@dataclass(frozen=True, slots=True)
class SampledTurn:
    prompt_token_ids: Sequence[int]  # `as_list` to send them
    completion_token_ids: list[int]
    completion_logprobs: list[float]


def _args(arguments: str) -> object:
    try:
        return orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return arguments


def fingerprint(text: str, tool_calls: list[tuple[str, str]]) -> str:
    key = orjson.dumps([text.strip(), [[name, _args(args)] for name, args in tool_calls]], option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(key, digest_size=16).hexdigest()


class SpliceIndex:
    """One session's sampled turns, by fingerprint (newest wins)."""

    def __init__(self) -> None:
        self._turns: dict[str, SampledTurn] = {}
        self._longest = 0  # prompt
        self._sampled = 0  # ids, over every turn

    def __len__(self) -> int:
        return len(self._turns)

    def add(self, c: Completion) -> None:
        key = fingerprint(c.text, [(t.name, t.arguments) for t in c.tool_calls])
        self._turns[key] = SampledTurn(c.prompt_token_ids, c.completion_token_ids, c.completion_logprobs)
        self._longest = max(self._longest, len(c.prompt_token_ids))
        self._sampled += len(c.completion_token_ids)

    @property
    def size(self) -> int:
        """The bytes it holds, for the session cache: a prompt's ids are mostly the last one's
        (`chat.JoinedIds`), so the longest prompt once, and every sampled id with its logprob."""
        return ids_bytes(self._longest) + (ids_bytes(1) + 32) * self._sampled

    def lookup(self, m: Message) -> SampledTurn | None:
        if m.role != "assistant":
            return None
        return self._turns.get(fingerprint(m.text(), [(t.name, t.arguments) for t in m.tool_calls]))
