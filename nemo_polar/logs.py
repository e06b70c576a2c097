"""What the project's processes log: every line capped, whoever supplied what goes into it.

A caller controls much of what ends up in a log line (a request body in an error, a harness's
output): uncapped, one request could write megabytes per line. `install()` caps every record when
it is made, so it holds for every logger and handler (ours, uvicorn's, the libraries').
"""

from __future__ import annotations

import logging
from typing import Any

MAX_LINE = 4096


def install(max_chars: int = MAX_LINE) -> None:
    """Cap every log record this process makes at `max_chars` characters (idempotent)."""
    make = logging.getLogRecordFactory()
    if getattr(make, "capped_at", None) == max_chars:
        return
    make = getattr(make, "wrapped", make)

    def capped(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        text = record.getMessage()
        if len(text) > max_chars:
            record.msg, record.args = f"{text[:max_chars]}... [{len(text) - max_chars} more characters]", None
        return record

    capped.capped_at, capped.wrapped = max_chars, make  # type: ignore[attr-defined]
    logging.setLogRecordFactory(capped)
