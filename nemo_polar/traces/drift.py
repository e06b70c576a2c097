"""Where and why a call's prompt stops extending an earlier call's prompt + completion.

`align(parent, prompt)` compares a call's prompt with what an earlier call really saw and sampled
(`seen` = its prompt + its sampled tokens). Three outcomes:
- an exact extension: the chain continues, nothing to explain;
- a divergence that is only a template quirk: the call is re-attached after the parent's own
  sampled tokens (`resume` = where the call's prompt continues after its re-rendering of that turn);
- a divergence that changes the history the model saw: the call starts a new chain.

Causes: reasoning_removed, think_block_inserted, header_line, tool_args_reserialised and
retokenization are template quirks (repairable); compaction, system_prompt and unknown are not.
The token-level decision (where the divergence lies relative to the parent's last end-of-turn)
needs no tokenizer; naming the cause of a final-turn divergence uses one when given.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..record_codec import common_prefix

REPAIRABLE = frozenset(
    {"reasoning_removed", "think_block_inserted", "header_line", "tool_args_reserialised", "retokenization"}
)
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_THINK = re.compile(r"<think>.*?</think>\s*", re.S)
_THINK_ONLY = re.compile(r"\s*<think>.*?</think>\s*", re.S)
_RESYNC_WINDOW, _MAX_REPLACED, _MAX_SHIFT, _MAX_LOCAL_CHANGES = 16, 96, 96, 2


@dataclass(frozen=True)
class Alignment:
    position: int  # first index where the call's prompt differs from the parent's seen tokens
    cause: str | None  # None: an exact extension
    resume: int | None  # index in the call's prompt where the chain continues; None: fork
    close_turn: bool = False  # the parent's sample has no end-of-turn: one must be inserted
    detail: str = ""

    @property
    def exact(self) -> bool:
        return self.cause is None


def _index(seq: list[int], token: int | None, start: int, end: int | None = None) -> int:
    if token is None:
        return -1
    try:
        return seq.index(token, start, len(seq) if end is None else end)
    except ValueError:
        return -1


def align(
    parent_prompt: list[int], parent_sample: list[int], prompt: list[int], eot: int | None, tokenizer=None
) -> Alignment:
    seen = parent_prompt + parent_sample
    d = common_prefix(prompt, seen)
    if d == len(seen):
        return Alignment(d, None, len(seen))
    last_turn_start = _last_eot(parent_prompt, eot) + 1
    if d >= last_turn_start:  # inside the parent's final turn (generation prompt or sample)
        return _final_turn(parent_prompt, parent_sample, prompt, d, eot, tokenizer, shift=0)
    # the divergence lies in earlier history: walk it, skipping local changes (a header line, stripped
    # reasoning), up to where the parent's last turn starts; that turn is compared on its own
    walked = _walk_history(parent_prompt[:last_turn_start], prompt, d, _think_ids(tokenizer))
    if walked is not None:
        shift, causes = walked
        tail = parent_prompt[last_turn_start:] + parent_sample
        d2 = last_turn_start + shift + common_prefix(prompt[last_turn_start + shift :], tail)
        turn = _final_turn(parent_prompt, parent_sample, prompt, d2, eot, tokenizer, shift)
        if turn.resume is None:
            return Alignment(d, "unknown", None, detail="history changed locally and the last turn differs")
        replaced = _text(tokenizer, seen[d : d + 48])
        cause = "reasoning_removed" if "<think>" in replaced or "reasoning_removed" in causes else causes[0]
        return Alignment(d, cause, turn.resume, turn.close_turn, replaced.split("\n")[0][:120])
    cause = "system_prompt" if _index(seen, eot, 0, d) < 0 else "compaction"
    return Alignment(d, cause, None, detail=f"history differs from token {d} on")


def _walk_history(
    history: list[int], prompt: list[int], d: int, think: tuple[int | None, int | None]
) -> tuple[int, list[str]] | None:
    """Align `history` inside `prompt` from the divergence `d` on, allowing only local changes:
    `<think>` blocks the prompt lacks, and a few short replaced spans. Returns the final shift
    (prompt index - history index) and the changes seen, or None when the histories differ."""
    i, j, causes = d, d, []
    while True:
        step = common_prefix(history[i:], prompt[j:])
        i, j = i + step, j + step
        if i >= len(history):
            return j - i, causes
        if think[0] is not None and history[i] == think[0]:
            end = _index(history, think[1], i)
            if end < 0:
                return None
            # skip the block and the whitespace after it: as many tokens as make the rest line up best
            i = max((end + 1 + k for k in range(4)), key=lambda n: common_prefix(history[n:], prompt[j:]))
            causes.append("reasoning_removed")
            continue
        replaced = _replaced_span(history, prompt, i, j)
        if replaced is None or causes.count("header_line") >= _MAX_LOCAL_CHANGES:
            return None
        i, j = i + replaced[0], j + replaced[1]
        causes.append("header_line")


def _replaced_span(history: list[int], prompt: list[int], i: int, j: int) -> tuple[int, int] | None:
    """(w, v): history[i:i+w] was replaced by prompt[j:j+v], the smallest w after which both agree again."""
    n = _RESYNC_WINDOW
    windows: dict[tuple[int, ...], int] = {}
    for v in range(_MAX_REPLACED + _MAX_SHIFT, -1, -1):  # descending: the smallest v wins
        windows[tuple(prompt[j + v : j + v + n])] = v
    for w in range(1, _MAX_REPLACED):
        probe = tuple(history[i + w : i + w + n])
        if len(probe) < n:  # too little history left to tell a local change from a new one
            break
        v = windows.get(probe)
        if v is not None and abs(v - w) <= _MAX_SHIFT:
            return w, v
    return None


def _think_ids(tokenizer) -> tuple[int | None, int | None]:
    if tokenizer is None:
        return None, None
    ids = [tokenizer.convert_tokens_to_ids(t) for t in ("<think>", "</think>")]
    if any(i is None or i == tokenizer.unk_token_id for i in ids):
        return None, None
    return ids[0], ids[1]


def _last_eot(tokens: list[int], eot: int | None) -> int:
    if eot is None:
        return -1
    for i in range(len(tokens) - 1, -1, -1):
        if tokens[i] == eot:
            return i
    return -1


def _final_turn(
    parent_prompt: list[int], sample: list[int], prompt: list[int], d: int, eot: int | None, tokenizer, shift: int
) -> Alignment:
    """The divergence lies in the parent's last turn: find where the call's re-rendering of it ends."""
    turn_start = len(parent_prompt) + shift
    if d == turn_start + len(sample):  # the whole turn matched (only possible after a shift)
        return Alignment(d, None, d)
    end = _index(prompt, eot, d)
    if end < 0:
        return Alignment(d, "unknown", None, detail="no end-of-turn after the divergence")
    close = not sample or sample[-1] != eot
    if d < turn_start:  # the generation prompt differs: glue the history lacks, or the turn is gone
        glue = _text(tokenizer, parent_prompt[d - shift :])
        body = sample[:-1] if sample and sample[-1] == eot else sample
        if tokenizer is None:
            kept = bool(body) and prompt[d : d + len(body)] == body  # the sampled turn follows right away
        else:  # the glue is a think block, and what follows it is the same turn, however re-rendered
            kept = _THINK_ONLY.fullmatch(glue) is not None and _name_turn_change(sample, prompt[d:end], eot, tokenizer)
            kept = kept and (prompt[d:end] == body or kept in REPAIRABLE)
        if kept:
            return Alignment(d, "think_block_inserted", end + 1, close, glue)
        return Alignment(d, "compaction", None, detail="the earlier assistant turn is not in this prompt")
    cause = _name_turn_change(sample, prompt[turn_start:end], eot, tokenizer)
    return Alignment(d, cause, end + 1 if cause in REPAIRABLE else None, close)


def _name_turn_change(sample: list[int], rendered: list[int], eot: int | None, tokenizer) -> str:
    if tokenizer is None:
        return "retokenization"  # unnamed without a tokenizer: the same turn, re-rendered
    body = sample[:-1] if sample and sample[-1] == eot else sample
    said, shown = _text(tokenizer, body), _text(tokenizer, rendered)
    if said == shown:
        return "retokenization"
    if "<think>" in said and _THINK.sub("", said).strip() == _THINK.sub("", shown).strip():
        return "reasoning_removed"
    if _same_tool_calls(_THINK.sub("", said), _THINK.sub("", shown)):
        return "tool_args_reserialised"
    return "unknown"


def _same_tool_calls(said: str, shown: str) -> bool:
    a, b = _TOOL_CALL.findall(said), _TOOL_CALL.findall(shown)
    if not a or len(a) != len(b) or _TOOL_CALL.sub("", said).strip() != _TOOL_CALL.sub("", shown).strip():
        return False
    try:
        return [json.loads(x) for x in a] == [json.loads(x) for x in b]
    except json.JSONDecodeError:
        return False


def _text(tokenizer, ids: list[int]) -> str:
    if tokenizer is None:
        return ""
    return tokenizer.decode(ids, skip_special_tokens=False)
