"""The render step: a call's answer in its dialect. An error, a whole answer as JSON, or a whole answer
played as the dialect's stream; a relayed stream's events are rendered as they come (`relay.py`)."""

from __future__ import annotations

from starlette.responses import Response

from ..chat import ChatRequest, Completion, Delta, ToolCallDelta
from ..errors import PolarError
from ..serving import json_response
from .dialects import Dialect

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def error_response(dialect: Dialect, err: PolarError) -> Response:
    return json_response(dialect.render_error(err), err.status_code)


def whole_answer(dialect: Dialect, request: ChatRequest, completion: Completion) -> Response:
    if request.stream:  # the engine answered whole: play it as this dialect's stream
        renderer = dialect.stream_renderer(request)
        events = [e for d in replay(completion) for e in renderer.delta(d)] + renderer.finish(completion)
        return Response(b"".join(events), media_type="text/event-stream", headers=SSE_HEADERS)
    return json_response(dialect.render_response(completion, request))


def replay(c: Completion) -> list[Delta]:
    """A whole completion as the deltas a stream would have carried."""
    deltas = []
    if c.reasoning:
        deltas.append(Delta(reasoning=c.reasoning))
    if c.text:
        deltas.append(Delta(text=c.text))
    for i, t in enumerate(c.tool_calls):
        deltas.append(Delta(tool_call=ToolCallDelta(i, t.id, t.name, t.arguments)))
    return deltas
