"""`answer`: the agent's answer file, matched against a pattern: 1.0 when it matches, else 0.0.

For tasks whose reward is a property of what the agent answered rather than of a patch: the agent
writes its answer to `file` in its working copy (`examples/one_call_agent.py` does), and the reward
is whether `pattern` (a regular expression) is found in it. No file is the agent's own failure: 0.0.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from ..config import Strict
from .base import EvalContext, Evaluation, Evaluator


class AnswerMatches(Evaluator):
    name = "answer"

    class Settings(Strict):
        file: str = Field("answer.txt", description="the agent's answer, in its working copy")
        pattern: str = Field(description="a regular expression the answer must contain")

        @field_validator("pattern")
        @classmethod
        def _compiles(cls, value: str) -> str:
            re.compile(value)
            return value

    async def evaluate(self, ctx: EvalContext) -> Evaluation:
        path = ctx.work / self.settings.file
        text = path.read_text(errors="replace") if path.is_file() else None
        reward = float(text is not None and re.search(self.settings.pattern, text) is not None)
        return Evaluation(reward=reward, components={"answer": reward}, details={"answer": (text or "")[:200]})
