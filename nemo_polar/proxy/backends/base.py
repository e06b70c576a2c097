"""What a backend is: one inference engine's OpenAI Chat Completions endpoint, made token-faithful.

Every engine we support speaks Chat Completions, so the request builder and the stream assembly
live here; an engine module only adds the fields that make it return token ids and logprobs
(`training_fields`) and says where they come back (`prompt_ids`, `completion_tokens`).
An answer without them raises `InvalidUpstream`: an untrainable record is never silent.
"""

from __future__ import annotations

from typing import Any

import orjson

from ...chat import ChatRequest, Completion, Delta, Message, ToolCall, ToolCallDelta, Usage, merged, same_prefix
from ...errors import InvalidUpstream, UpstreamError
from ...session_cache import kept_json
from ..splice import SpliceIndex


def message_body(m: Message) -> dict[str, Any]:
    """The message as Chat Completions sends it; built once per message and kept (`chat_form`): do not
    change it, copy it."""
    if m.chat_form is None:
        m.chat_form = _chat_form(m)
    return m.chat_form


def body_json(body: dict[str, Any], messages: list[Message]) -> bytes:
    """`orjson.dumps(body)`, without serialising a long history again on every call: the messages
    that are their request message's kept form (`message_body`), the same objects call after call,
    go in as the JSON they were serialised to once. An engine's own message dicts (splices) are
    new on every call and serialised as they come. The leading messages the last call sent as the same
    forms are not looked at one by one: that call's forms and what they were written as are kept on the
    first message (`Message.chat_run`), and the shared part found by identity. Never the messages
    themselves: the first one holding a list that holds it would be a reference cycle (see
    `dialects.base.converted_all`)."""
    sent = body.get("messages")
    if not isinstance(sent, list) or len(sent) != len(messages) or not messages:
        return orjson.dumps(body)
    last = messages[0].chat_run
    k = same_prefix(sent, last[0]) if last is not None else 0
    wire = last[1][:k] if k else []
    for d, m in zip(sent[k:], messages[k:], strict=True):
        if d is not m.chat_form:
            wire.append(d)
        else:
            if m.chat_json is None:
                m.chat_json = orjson.Fragment(kept_json(d))
            wire.append(m.chat_json)
    messages[0].chat_run = (sent, wire)
    return orjson.dumps({**body, "messages": wire})


def _chat_form(m: Message) -> dict[str, Any]:
    d: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.reasoning:
        d["reasoning"] = m.reasoning  # vLLM's input field; the template decides whether to render it
    if m.tool_calls:
        d["tool_calls"] = [
            {"id": t.id, "type": "function", "function": {"name": t.name, "arguments": t.arguments}}
            for t in m.tool_calls
        ]
    if m.tool_call_id is not None:
        d["tool_call_id"] = m.tool_call_id
    if m.name is not None and m.role != "tool":
        d["name"] = m.name
    return d


def tool_choice_body(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if isinstance(choice, dict):
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


class Backend:
    engine = "openai"
    streams = True  # False: the engine is always called without streaming
    splices = False  # True: the engine takes earlier turns' tokens back (build_body gets a SpliceIndex)
    lists_models = True  # False: the server has no /v1/models, so the model's name must be given

    def explain(self, error: UpstreamError, body: dict[str, Any] | None) -> UpstreamError:
        """The server's failure of the call that sent `body`, with what this engine knows of its causes."""
        return error

    @classmethod
    def no_model_name(cls) -> str:
        """Why a call to this engine's server has no model name (where `lists_models` is False)."""
        return (
            f"upstream.engine={cls.engine}: the server lists no models (no /v1/models) and none was named: set "
            "upstream.model to the name it serves the policy under (NeMo-RL: policy.model_name)"
        )

    def __init__(self, sampling: dict[str, Any] | None = None):
        self.sampling = dict(sampling or {})  # pinned sampling fields, override the harness

    def build_body(self, req: ChatRequest, splices: SpliceIndex | None, model: str) -> dict[str, Any]:
        """The upstream body for the served `model`. `splices` holds the session's earlier turns
        (used by engines that splice)."""
        body: dict[str, Any] = {"model": model, "messages": self.messages(req, splices)}
        if req.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in req.tools
            ]
            if req.tool_choice is not None:
                body["tool_choice"] = tool_choice_body(req.tool_choice)
        for key in ("max_tokens", "temperature", "top_p", "top_k", "seed", "presence_penalty", "frequency_penalty"):
            value = getattr(req, key)
            if value is not None:
                body[key] = value
        if req.stop:
            body["stop"] = req.stop
        if req.response_format is not None:
            body["response_format"] = req.response_format
        body.update(req.extra)
        if req.thinking is not None:
            body.setdefault("chat_template_kwargs", {}).setdefault("enable_thinking", req.thinking)
        body.update(self.sampling)
        body["stream"] = req.stream and self.streams
        if body["stream"]:
            body["stream_options"] = {"include_usage": True}
        body.update(self.training_fields())
        return body

    # --- engine hooks -------------------------------------------------------------------------
    def messages(self, req: ChatRequest, splices: SpliceIndex | None) -> list[dict[str, Any]]:
        return [message_body(m) for m in req.messages]

    def training_fields(self) -> dict[str, Any]:
        return {}

    def prompt_ids(self, body: dict[str, Any], choice: dict[str, Any]) -> list[int] | None:
        return body.get("prompt_token_ids")

    def completion_tokens(self, choice: dict[str, Any]) -> tuple[list[int], list[float]] | None:
        """(token ids, logprobs) carried by one choice or stream chunk; None when it has none."""
        ids = choice.get("token_ids")
        content = (choice.get("logprobs") or {}).get("content")
        if ids is None or content is None:
            return None
        return ids, [float(c["logprob"]) for c in content]  # ids: extended into the completion, a copy anyway

    # --- assembly -----------------------------------------------------------------------------
    def parse_response(self, body: dict[str, Any]) -> Completion:
        choices = body.get("choices") or []
        if not choices:
            raise InvalidUpstream("upstream answer has no choices")
        parser = StreamAssembler(self)
        parser.feed_choice(body, choices[0], choices[0].get("message") or {})
        parser.feed_usage(body.get("usage"))
        return parser.result()

    def stream_parser(self) -> StreamAssembler:
        return StreamAssembler(self)


_NO_DELTA: dict[str, Any] = {}


class StreamAssembler:
    """Collects an upstream answer, chunk by chunk (or all at once), into one Completion. Text is
    kept as pieces and joined once: `+=` on a kept string copies it whole at every token."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.c = Completion()
        self.calls: dict[int, ToolCall] = {}
        self.arguments: dict[int, list[str]] = {}
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.finish: str | None = None
        self.tokens_seen = False
        self.identified = False  # id, model and prompt ids known

    def feed(self, chunk: dict[str, Any]) -> list[Delta]:
        """One parsed stream chunk -> the deltas to relay."""
        choices = chunk.get("choices")
        usage = chunk.get("usage")
        if usage:
            self.feed_usage(usage)
        if choices:
            choice = choices[0]
            return self.feed_choice(chunk, choice, choice.get("delta") or _NO_DELTA)
        if "error" in chunk:
            raise InvalidUpstream(f"upstream stream error: {chunk['error']}")
        if self.c.prompt_token_ids == [] and chunk.get("prompt_token_ids"):
            self.c.prompt_token_ids = list(chunk["prompt_token_ids"])
        return []

    def feed_all(self, chunks: list[dict[str, Any]]) -> list[Delta]:
        """The chunks of one read -> the deltas to relay, each run of pieces of one kind as one
        (`chat.merged`). Most chunks are one token of text and nothing else: their text is gathered
        here into one delta, without a delta each (the rest go through `feed`)."""
        deltas: list[Delta] = []
        run: list[str] = []  # the text of the token chunks since the last delta
        for chunk in chunks:
            choices = chunk.get("choices")
            if choices and self.identified and not chunk.get("usage") and "metadata" not in chunk:
                choice = choices[0]
                msg = choice.get("delta")
                if msg and len(msg) == 1 and not choice.get("finish_reason"):
                    content = msg.get("content")
                    if content:
                        self._tokens(choice)
                        self.text.append(content)
                        run.append(content)
                        continue
            if run:
                deltas.append(Delta(text="".join(run)))
                run = []
            deltas += self.feed(chunk)
        if run:
            deltas.append(Delta(text="".join(run)))
        return merged(deltas)

    def _tokens(self, choice: dict[str, Any]) -> None:
        tokens = self.backend.completion_tokens(choice)
        if tokens is not None:
            self.tokens_seen = True
            self.c.completion_token_ids += tokens[0]
            self.c.completion_logprobs += tokens[1]

    def feed_choice(self, body: dict[str, Any], choice: dict[str, Any], msg: dict[str, Any]) -> list[Delta]:
        c = self.c
        if not self.identified:  # the answer's id, model and prompt come with its first chunk(s)
            c.id = c.id or body.get("id", "")
            c.model = c.model or body.get("model", "")
            if not c.prompt_token_ids:  # the parsed answer's own list: nothing else holds it
                c.prompt_token_ids = self.backend.prompt_ids(body, choice) or []
            self.identified = bool(c.id and c.model and c.prompt_token_ids)
        if c.policy_version is None and "metadata" in body:  # SGLang: {"metadata": {"weight_version": ...}}
            version = (body["metadata"] or {}).get("weight_version")
            c.policy_version = None if version is None else str(version)
        self._tokens(choice)
        finish = choice.get("finish_reason")
        if finish:
            self.finish = finish
        content = msg.get("content")
        if len(msg) == 1 and content:  # most chunks: one token of text
            self.text.append(content)
            return [Delta(text=content)]
        deltas: list[Delta] = []
        reasoning = msg.get("reasoning_content") or msg.get("reasoning")
        if reasoning:
            self.reasoning.append(reasoning)
            deltas.append(Delta(reasoning=reasoning))
        if content:
            self.text.append(content)
            deltas.append(Delta(text=content))
        tool_calls = msg.get("tool_calls")
        if tool_calls:
            deltas += [self._tool_call(t, i) for i, t in enumerate(tool_calls)]
        return deltas

    def _tool_call(self, t: dict[str, Any], position: int) -> Delta:
        index = t.get("index", position)
        fn = t.get("function") or {}
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = ToolCall(t.get("id") or f"call_{index}", fn.get("name") or "", "")
            self.c.tool_calls.append(call)
            self.arguments[index] = []
            first = True
        else:
            first = False
            if fn.get("name"):
                call.name += fn["name"]
        args = fn.get("arguments") or ""
        self.arguments[index].append(args)
        return Delta(
            tool_call=ToolCallDelta(
                index=index,
                id=call.id if first else None,
                name=call.name if first else None,
                arguments=args,
            )
        )

    def feed_usage(self, usage: dict[str, Any] | None) -> None:
        if usage:
            details = usage.get("prompt_tokens_details") or {}
            self.c.usage = Usage(
                prompt_tokens=usage.get("prompt_tokens") or 0,
                completion_tokens=usage.get("completion_tokens") or 0,
                cached_tokens=details.get("cached_tokens") or 0,
            )

    def result(self) -> Completion:
        c = self.c
        c.text = "".join(self.text)
        c.reasoning = "".join(self.reasoning) if self.reasoning else None
        for index, call in self.calls.items():
            call.arguments = "".join(self.arguments[index])
        c.finish_reason = self.finish or "stop"
        if c.tool_calls and c.finish_reason == "stop":
            c.finish_reason = "tool_calls"
        if not c.prompt_token_ids:
            raise InvalidUpstream(f"{self.backend.engine} answer carries no prompt token ids")
        if not self.tokens_seen:
            raise InvalidUpstream(f"{self.backend.engine} answer carries no completion token ids or logprobs")
        if len(c.completion_token_ids) != len(c.completion_logprobs):
            raise InvalidUpstream(
                f"{len(c.completion_token_ids)} completion tokens but {len(c.completion_logprobs)} logprobs"
            )
        if not c.usage.prompt_tokens:
            c.usage = Usage(len(c.prompt_token_ids), len(c.completion_token_ids), c.usage.cached_tokens)
        return c
