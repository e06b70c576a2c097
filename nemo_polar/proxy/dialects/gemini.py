"""Gemini: `POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent?alt=sse` (Gemini CLI, Pi).

Streaming is chosen by the path, never by the body; a stream is served as server-sent events
only, so `streamGenerateContent` without `alt=sse` (Google's JSON-array stream) is a 400. The same
two routes also answer under `/v1/`, the google-genai Python SDK's default API version.

Decisions where the API leaves room (each one keeps the same history giving the same prompt):
- Tool call ids. Gemini's `functionCall` may come without `id`; one is minted from its place,
  `call_<content index>_<part index>`, which never changes as the conversation grows. A
  `functionResponse` answers a call of the latest model turn: the one with its `id`, else the
  first unanswered one with its `name`; it takes that call's id, so the pair always matches.
- Tool results. A `response` whose only key is `output` with a string (Gemini CLI's shape) becomes
  that string; any other `response` becomes its JSON text, so `{"error": ...}` stays visible.
  Images in `functionResponse.parts` follow the tool messages as a user message.
- Function call arguments that are not a JSON object (broken JSON, a bare string) are sent as
  `args: {"_raw_arguments": "<text as sampled>"}`; the harness's tool then reports bad arguments,
  and when that call comes back in history it is restored to the exact text the model sampled.
- Thought parts are sent only when `thinkingConfig.includeThoughts` is true, as Gemini does (the
  record keeps the reasoning either way). Gemini CLI drops them from its history.
- `usageMetadata.candidatesTokenCount` counts every sampled token, reasoning included (the engine
  gives no split), so there is no `thoughtsTokenCount`.
- Errors are `{error: {code, message, status}}` with Google's status names. A 413 is
  INVALID_ARGUMENT, as Google answers an over-size payload: RESOURCE_EXHAUSTED means quota,
  which Gemini CLI retries and answers by switching models, and neither helps a body too large.
- A stream that fails mid-way ends with the error object as a bare JSON line, not a `data:`
  event: that is what Google sends, and what both SDKs look for (google-genai raises `APIError`
  for it; @google/genai, under Gemini CLI, throws "got status: ..." only for a bare JSON chunk and
  would take a `data:` error event for an empty answer).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import orjson

from ...chat import ChatRequest, Completion, Delta, Message, Tool, ToolCall
from ...errors import PolarError, RequestInvalid
from ..ids import new_hex
from .base import HOLES, Dialect, StreamRenderer, Template, sse, validate
from .wire import gemini as wire

log = logging.getLogger("nemo_polar.proxy.gemini")

RAW_ARGUMENTS = "_raw_arguments"  # see the module doc: arguments that are not a JSON object

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}
_CHOICE = {"AUTO": "auto", "VALIDATED": "auto", "NONE": "none", "MODE_UNSPECIFIED": None}


def gemini_error(err: PolarError) -> dict[str, Any]:
    code = err.status_code
    status = _STATUS.get(code) or ("INVALID_ARGUMENT" if 400 <= code < 500 else "INTERNAL")
    return {"error": {"code": code, "message": err.message, "status": status}}


class Gemini(Dialect):
    name = "gemini"
    routes = [
        ("/v1beta/models/{model}:generateContent", ["POST"]),
        ("/v1beta/models/{model}:streamGenerateContent", ["POST"]),
        ("/v1/models/{model}:generateContent", ["POST"]),
        ("/v1/models/{model}:streamGenerateContent", ["POST"]),
    ]

    history = ("contents", wire.Content)

    def parse_request(self, body: Any, path_params: dict[str, str], query: dict[str, str]) -> ChatRequest:
        req = validate(wire.GenerateContentRequest, body)
        stream = path_params.get("path", "").endswith(":streamGenerateContent")
        if stream and query.get("alt") != "sse":
            raise RequestInvalid("streamGenerateContent is served as server-sent events only: add ?alt=sse")
        gen = req.generation_config or wire.GenerationConfig()
        if gen.candidate_count not in (None, 1):
            raise RequestInvalid("generationConfig.candidateCount: only one candidate per call is supported")
        _log_ignored(req, gen)
        thinking, include_thoughts = _thinking(gen.thinking_config)
        tools, tool_choice = _tools(req.tools, req.tool_config)
        return ChatRequest(
            model=path_params.get("model") or "gemini",
            messages=_system(req.system_instruction) + _History().walk(req.contents),
            tools=tools,
            tool_choice=tool_choice,
            stream=stream,
            max_tokens=gen.max_output_tokens,
            temperature=gen.temperature,
            top_p=gen.top_p,
            top_k=gen.top_k,
            stop=list(gen.stop_sequences or []),
            seed=gen.seed,
            presence_penalty=gen.presence_penalty,
            frequency_penalty=gen.frequency_penalty,
            thinking=thinking,
            response_format=_response_format(gen),
            hints={"include_thoughts": include_thoughts},
        )

    def render_response(self, completion: Completion, request: ChatRequest) -> dict[str, Any]:
        reasoning = completion.reasoning if request.hints.get("include_thoughts") else None
        parts = _text_parts(reasoning, completion.text) + [_call_part(t) for t in completion.tool_calls]
        return {
            "candidates": [_candidate(parts, completion.finish_reason)],
            "usageMetadata": _usage(completion),
            "modelVersion": request.model,
            "responseId": completion.id or _new_id(),
        }

    def stream_renderer(self, request: ChatRequest) -> StreamRenderer:
        return _GeminiStream(request.model, bool(request.hints.get("include_thoughts")))

    def render_error(self, err: PolarError) -> dict[str, Any]:
        return gemini_error(err)


# --- request ------------------------------------------------------------------------------------
def _log_ignored(req: wire.GenerateContentRequest, gen: wire.GenerationConfig) -> None:
    ignored = [k for k in ("safety_settings", "cached_content") if getattr(req, k) is not None]
    ignored += sorted(req.model_extra or {}) + [f"generationConfig.{k}" for k in sorted(gen.model_extra or {})]
    if ignored:
        log.debug("gemini: ignoring %s", ", ".join(ignored))


def _thinking(tc: wire.ThinkingConfig | None) -> tuple[bool | None, bool]:
    """(thinking asked for, thoughts to be returned). A budget of 0 is Gemini's way to turn it off."""
    if tc is None:
        return None, False
    include = bool(tc.include_thoughts)
    if tc.thinking_budget == 0:
        return False, include
    if include or tc.thinking_budget is not None or tc.thinking_level:
        return True, include
    return None, include


def json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A Gemini Schema as JSON Schema: its upper-case type names ("OBJECT") lower-cased at every depth.

    Only schema positions are walked, so a property that happens to be named "type" is left alone.
    """
    out = dict(schema)
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = kind.lower()
    elif isinstance(kind, list):
        out["type"] = [k.lower() if isinstance(k, str) else k for k in kind]
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = json_schema(out[key])
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(out.get(key), list):
            out[key] = [json_schema(s) if isinstance(s, dict) else s for s in out[key]]
    for key in ("properties", "$defs", "definitions"):
        if isinstance(out.get(key), dict):
            out[key] = {k: json_schema(s) if isinstance(s, dict) else s for k, s in out[key].items()}
    return out


def _declaration(d: wire.FunctionDeclaration) -> Tool:
    if d.parameters is not None and d.parameters_json_schema is not None:
        raise RequestInvalid(f"tools: function {d.name!r} sets both parameters and parametersJsonSchema")
    if d.parameters_json_schema is not None:
        params = d.parameters_json_schema
    elif d.parameters is not None:
        params = json_schema(d.parameters)
    else:
        params = {"type": "object", "properties": {}}
    return Tool(d.name, d.description or "", params)


def _tools(tools: list[wire.Tool] | None, config: wire.ToolConfig | None) -> tuple[list[Tool], Any]:
    out: list[Tool] = []
    for t in tools or []:
        if t.model_extra:  # googleSearch, codeExecution, ...: Google runs those, we cannot
            log.debug("gemini: dropping tools %s", ", ".join(sorted(t.model_extra)))
        out += [_declaration(d) for d in t.function_declarations or []]
    fcc = config.function_calling_config if config else None
    if fcc is None or fcc.mode is None:
        return out, None
    mode = fcc.mode.upper()
    if mode in _CHOICE:
        return out, _CHOICE[mode]
    if mode != "ANY":
        raise RequestInvalid(f"toolConfig.functionCallingConfig.mode: unknown mode {fcc.mode!r}")
    allowed = fcc.allowed_function_names or []
    unknown = sorted(set(allowed) - {t.name for t in out})
    if unknown:
        raise RequestInvalid(f"toolConfig.functionCallingConfig.allowedFunctionNames: no such function {unknown}")
    if len(allowed) == 1:
        return out, {"name": allowed[0]}
    # several allowed names: the model must call one of them, so only they are offered
    return ([t for t in out if t.name in allowed] if allowed else out), "required"


def _response_format(gen: wire.GenerationConfig) -> dict[str, Any] | None:
    schema = gen.response_json_schema
    if schema is None and gen.response_schema is not None:
        schema = json_schema(gen.response_schema)
    mime = (gen.response_mime_type or "text/plain").lower()
    if mime == "application/json":
        if schema is None:
            return {"type": "json_object"}
        return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
    if mime == "text/plain" and schema is None:
        return None
    raise RequestInvalid(
        f"generationConfig.responseMimeType: {gen.response_mime_type!r} with a schema is not supported;"
        " use application/json"
    )


def _system(si: wire.Content | str | None) -> list[Message]:
    if si is None:
        return []
    if isinstance(si, str):
        text = si
    else:
        if any(p.text is None for p in si.parts):
            raise RequestInvalid("systemInstruction: only text parts are supported")
        text = "\n".join(p.text or "" for p in si.parts)
    return [Message("system", text)] if text else []


def _arguments(args: dict[str, Any] | None) -> str:
    """A functionCall's args as arguments text (undoing the `_raw_arguments` fallback)."""
    if args and list(args) == [RAW_ARGUMENTS] and isinstance(args[RAW_ARGUMENTS], str):
        return args[RAW_ARGUMENTS]
    # json.dumps' spacing is what vLLM's tool parsers emit, so a call reads back as it was sampled
    return json.dumps(args or {}, ensure_ascii=False)


def _tool_output(response: dict[str, Any]) -> str:
    if list(response) == ["output"] and isinstance(response["output"], str):
        return response["output"]
    return json.dumps(response, ensure_ascii=False)


def _image(blob: wire.Blob, where: str) -> dict[str, Any]:
    if not blob.mime_type.startswith("image/"):
        raise RequestInvalid(f"{where}.inlineData: only images are supported, not {blob.mime_type!r}")
    return {"type": "image_url", "image_url": {"url": f"data:{blob.mime_type};base64,{blob.data}"}}


def _no_data(p: wire.Part, where: str) -> None:
    """A part that is neither text, image nor function call/response: refused, or skipped if it holds nothing."""
    for field, label in (
        ("file_data", "fileData"),
        ("executable_code", "executableCode"),
        ("code_execution_result", "codeExecutionResult"),
        ("inline_data", "inlineData"),
    ):
        if getattr(p, field) is not None:
            raise RequestInvalid(f"{where}: {label} parts are not supported here")
    if p.text is not None:  # a thought part in a user turn: nothing a model can be shown
        log.debug("gemini: dropping a thought part at %s", where)


def _user_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if len(parts) == 1 and parts[0]["type"] == "text":
        return parts[0]["text"]
    return parts or ""


class _History:
    """Walks `contents` into canonical messages, owning the tool call ids (see the module doc)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.open_calls: list[ToolCall] = []  # the latest model turn's calls not answered yet
        self.last_role = ""

    def walk(self, contents: list[wire.Content]) -> list[Message]:
        for ci, content in enumerate(contents):
            role = "model" if content.role == "model" else "user"
            if role == "model":
                self._model(ci, content.parts)
            else:
                self._user(ci, content.parts)
            self.last_role = role
        return self.messages

    def _model(self, ci: int, parts: list[wire.Part]) -> None:
        if self.last_role != "model":
            self.open_calls = []
        msg, text, reasoning = Message("assistant"), [], []
        for pi, p in enumerate(parts):
            if p.function_call is not None:
                fc = p.function_call
                call = ToolCall(fc.id or f"call_{ci}_{pi}", fc.name, _arguments(fc.args))
                msg.tool_calls.append(call)
                self.open_calls.append(call)
            elif p.text is not None:
                (reasoning if p.thought else text).append(p.text)
            else:
                _no_data(p, f"contents[{ci}].parts[{pi}]")
        msg.content, msg.reasoning = "".join(text), "".join(reasoning) or None
        self.messages.append(msg)

    def _user(self, ci: int, parts: list[wire.Part]) -> None:
        tools: list[Message] = []
        rest: list[dict[str, Any]] = []
        for pi, p in enumerate(parts):
            where = f"contents[{ci}].parts[{pi}]"
            if p.function_response is not None:
                fr = p.function_response
                call_id = self._answer(fr, f"{ci}_{pi}")
                tools.append(Message("tool", _tool_output(fr.response), tool_call_id=call_id, name=fr.name))
                rest += [_user_part(q, f"{where}.functionResponse.parts[{qi}]") for qi, q in enumerate(fr.parts or [])]
            elif (p.text is not None and not p.thought) or p.inline_data is not None:
                rest.append(_user_part(p, where))
            else:
                _no_data(p, where)
        # tool results must follow the calls directly; the turn's other parts come after them
        self.messages += tools
        if rest or not tools:
            self.messages.append(Message("user", _user_content(rest)))

    def _answer(self, fr: wire.FunctionResponse, place: str) -> str:
        calls = self.open_calls
        match = next((c for c in calls if fr.id and c.id == fr.id), None)
        match = match or next((c for c in calls if c.name == fr.name), None)
        if match is None:
            return fr.id or f"call_{place}"
        calls.remove(match)
        return match.id


def _user_part(p: wire.Part, where: str) -> dict[str, Any]:
    if p.inline_data is not None:
        return _image(p.inline_data, where)
    if p.text is not None and not p.thought:
        return {"type": "text", "text": p.text}
    _no_data(p, where)
    raise RequestInvalid(f"{where}: a function response part must be text or an image")


# --- response -----------------------------------------------------------------------------------
def _new_id() -> str:
    return new_hex()


def _args(arguments: str) -> dict[str, Any]:
    """A call's arguments text as Gemini's `args` object (the fallback is in the module doc)."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {RAW_ARGUMENTS: arguments}


def _call_part(t: ToolCall) -> dict[str, Any]:
    return {"functionCall": {"id": t.id, "name": t.name, "args": _args(t.arguments)}}


def _text_parts(reasoning: str | None, text: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if reasoning:
        parts.append({"text": reasoning, "thought": True})
    if text:
        parts.append({"text": text})
    return parts


def _candidate(parts: list[dict[str, Any]], finish_reason: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
    if finish_reason is not None:
        candidate["finishReason"] = _FINISH.get(finish_reason, "OTHER")
    candidate["index"] = 0
    return candidate


def _usage(c: Completion) -> dict[str, Any]:
    u = c.usage
    usage = {
        "promptTokenCount": u.prompt_tokens,
        "candidatesTokenCount": u.completion_tokens,
        "totalTokenCount": u.prompt_tokens + u.completion_tokens,
    }
    if u.cached_tokens:
        usage["cachedContentTokenCount"] = u.cached_tokens
    return usage


class _GeminiStream(StreamRenderer):
    """`data: {GenerateContentResponse}` per piece; function calls whole in the last chunk."""

    def __init__(self, model: str, include_thoughts: bool):
        self.model = model
        self.include_thoughts = include_thoughts
        self.id = _new_id()
        self.template = Template(self._body(HOLES[0]))  # every chunk but the last
        self.text_template = Template(self._body([{"text": HOLES[0]}]))  # most of them: a piece of text

    def _body(self, parts: Any, completion: Completion | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"candidates": [_candidate(parts, completion and completion.finish_reason)]}
        if completion is not None:
            body["usageMetadata"] = _usage(completion)
        body["modelVersion"] = self.model
        body["responseId"] = self.id
        return body

    def delta(self, delta: Delta) -> list[bytes]:
        # Gemini has no opening event. Tool call pieces wait for `finish`: Gemini never streams
        # partial args, and the finished turn holds each call's complete arguments.
        reasoning = delta.reasoning if self.include_thoughts else None
        if not reasoning:
            return [self.text_template.render(delta.text)] if delta.text else []
        return [self.template.render(_text_parts(reasoning, delta.text))]

    def finish(self, completion: Completion) -> list[bytes]:
        return [sse(self._body([_call_part(t) for t in completion.tool_calls], completion))]

    def error(self, err: PolarError) -> list[bytes]:
        return [orjson.dumps(gemini_error(err)) + b"\n"]
