"""Each harness CLI's real requests, captured from a run through the proxy and kept as replay cases.

A capture is one session's calls as the CLI sent them (`CompletionRecord.native_request`: credentials are
already removed by the store), with the dialect each arrived in and whether it streamed:
`tests/fixtures/harness_calls/<configuration>.json`. `tests/proxy/test_harness_replays.py` sends every kept
call again, byte for byte, through the proxy to the fake upstream, in the dialect and the streaming mode the
CLI used. To capture anew (a harness's version moved), run its capture test with `POLAR_CAPTURE=1`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nemo_polar.records import CompletionRecord

FOLDER = Path(__file__).resolve().parent / "fixtures" / "harness_calls"


def capture_requested(name: str) -> bool:
    """Whether this run writes `name`'s capture: POLAR_CAPTURE=1, or it has none yet."""
    return os.environ.get("POLAR_CAPTURE") == "1" or not (FOLDER / f"{name}.json").exists()


def save_calls(name: str, version: str, records: Iterable[CompletionRecord]) -> Path:
    """Keep the calls of one session of the harness configuration `name` (its CLI at `version`)."""
    calls = [{"dialect": r.dialect, "stream": r.stream, "body": r.native_request} for r in records]
    path = FOLDER / f"{name}.json"
    FOLDER.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"harness": name, "version": version, "calls": calls}, indent=1) + "\n")
    return path


def captures() -> dict[str, dict[str, Any]]:
    """configuration -> {"harness", "version", "calls"}, every capture kept."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(FOLDER.glob("*.json"))}
