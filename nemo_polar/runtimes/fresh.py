"""A fresh sandbox of a session's image, where its work is graded: what the agent did to its own sandbox is
not there. Started once, when first asked for (no network, the task's `eval_prepare` steps done, else its
`prepare` steps), by whichever asks first (an evaluator's prewarm while the agent runs, or its evaluation);
with the agent's working copy carried in when asked (`with_work`: a Harbor verifier's `fresh`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from .base import ContainerRuntime, Runtime, copy_work
from .spec import RuntimeSpec
from .steps import run_steps


class FreshSandbox:
    def __init__(self, spec: RuntimeSpec, root: Path, name: str, proxy_url: str = "") -> None:
        self.spec, self.root, self.name, self.proxy_url = spec, root, name, proxy_url
        self.runtime: Runtime | None = None
        self.starting: asyncio.Task | None = None

    async def get(self) -> Runtime:
        """The sandbox, started (once)."""
        if self.starting is None:
            self.starting = asyncio.ensure_future(self._start())
        return await asyncio.shield(self.starting)

    async def with_work(self, source: Runtime) -> Runtime:
        """The sandbox with `source`'s working copy as the agent left it, and nothing else of its session."""
        fresh = await self.get()
        assert isinstance(source, ContainerRuntime) and isinstance(fresh, ContainerRuntime), "an image's sandboxes"
        await copy_work(source, fresh)
        return fresh

    async def _start(self) -> Runtime:
        self.runtime = self.spec.model_copy(update={"network": "none"}).make(self.root, self.name, self.proxy_url)
        await self.runtime.start()
        steps = self.spec.eval_prepare if self.spec.eval_prepare is not None else self.spec.prepare
        await run_steps(self.runtime, steps, "eval_prepare")
        return self.runtime

    async def stop(self) -> None:
        if self.starting is not None and not self.starting.done():
            self.starting.cancel()
            await asyncio.gather(self.starting, return_exceptions=True)
        if self.runtime is not None:
            runtime, self.runtime = self.runtime, None
            await runtime.stop()
