"""Pre-encoded SSE events: a template with holes renders exactly the bytes `sse` gives for the
whole event, whatever goes in the holes."""

from __future__ import annotations

import pytest

from nemo_polar.proxy.dialects.base import HOLES, Template, sse

VALUES = ["", "w0", ' "quoted" \\ back\nslash', "ünïcödé ✓", {"tool_calls": [{"index": 0}]}, [1, 2.5, None], 7]


@pytest.mark.parametrize("value", VALUES)
def test_a_rendered_template_is_the_event_sse_would_encode(value):
    data = {"type": "content_block_delta", "index": 3, "delta": HOLES[0], "logprobs": [], "n": HOLES[1]}
    template = Template(data, "content_block_delta")
    assert template.render(value, 41) == sse(data | {"delta": value, "n": 41}, "content_block_delta")
    nested = {"choices": [{"index": 0, "delta": HOLES[0], "finish_reason": None}], "model": "m"}
    assert Template(nested).render(value) == sse(
        {"choices": [{"index": 0, "delta": value, "finish_reason": None}], "model": "m"}
    )


def test_holes_out_of_order_are_refused():
    with pytest.raises(ValueError):
        Template({"a": HOLES[1], "b": HOLES[0]})
