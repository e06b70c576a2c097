"""A stream's block of lines is parsed in one replace when it is nothing but one-line `data: ` events
(`upstream._parse_block`); whatever the block, that gives what the walk over its lines gives."""

from __future__ import annotations

import random

import orjson
import pytest

from nemo_polar.errors import PolarError
from nemo_polar.proxy.upstream import _parse, _parse_block

_PIECES = [
    lambda r: b"data: " + orjson.dumps({"i": r.randrange(9), "text": "data: \\n,[DONE]"}) + b"\n\n",
    lambda r: b"data:" + orjson.dumps({"i": r.randrange(9)}) + b"\n\n",  # no space after the colon
    lambda r: b"data: [DONE]\n\n",
    lambda r: b": keep-alive\n\n",
    lambda r: b"event: message\n",
    lambda r: b"data: " + orjson.dumps([r.randrange(9)]) + b"\r\n\r\n",
    lambda r: b"data: 1,2\n\n",  # a comma-separated list: not one chunk
    lambda r: b'data: {"a":1},{"b":2}\n\n',
    lambda r: b"data: {not json\n\n",
    lambda r: b"\n",
]


def _outcome(parse, block: bytes):
    try:
        return parse(bytearray(block))
    except PolarError as err:
        return type(err), err.message


@pytest.mark.parametrize("seed", range(4))
def test_any_block_parses_as_the_walk_over_its_lines_does(seed):
    r = random.Random(seed)
    plain = 0
    for _ in range(3000):
        # mostly the common shape (the first piece only), else any mix
        picks = (
            [0] * r.randint(1, 6) if r.random() < 0.3 else [r.randrange(len(_PIECES)) for _ in range(r.randint(1, 6))]
        )
        block = b"".join(_PIECES[i](r) for i in picks)
        plain += set(picks) == {0}
        assert _outcome(_parse_block, block) == _outcome(lambda b: _parse(b.split(b"\n")), block), block
    assert plain > 500  # the fast path was taken, not only the walk


def test_the_common_shape_with_its_end():
    block = b'data: {"a":1}\n\ndata: {"b":"x\\n\\ndata: y"}\n\ndata: [DONE]\n\n'
    assert _parse_block(bytearray(block)) == ([{"a": 1}, {"b": "x\n\ndata: y"}], True)
    assert _parse_block(bytearray(b"data: [DONE]\n\n")) == ([], True)
