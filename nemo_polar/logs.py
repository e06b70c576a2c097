"""What the project's processes log: every line capped, whoever supplied what goes into it.

A caller controls much of what ends up in a log line (a request body in an error, a harness's
output): uncapped, one request could write megabytes per line. `install()` caps every record when
it is made, so it holds for every logger and handler (ours, uvicorn's, the libraries'), and masks in it
every secret value of the tasks this process took (`redaction.hide`), its traceback included.
"""

from __future__ import annotations

import logging
from typing import Any

from .redaction import hidden, scrub

MAX_LINE = 4096


def install(max_chars: int = MAX_LINE) -> None:
    """Cap every log record this process makes at `max_chars` characters and mask the hidden values in it
    (idempotent)."""
    make = logging.getLogRecordFactory()
    if getattr(make, "capped_at", None) == max_chars:
        return
    make = getattr(make, "wrapped", make)

    def capped(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        text = record.getMessage()
        if secrets := hidden():
            shown = scrub(text, secrets)
            if shown is not text:
                text, record.msg, record.args = shown, shown, None
            if record.exc_info and record.exc_info[0] is not None:  # formatted now, so it is formatted scrubbed
                record.exc_text = scrub(logging.Formatter().formatException(record.exc_info), secrets)
        if len(text) > max_chars:
            record.msg, record.args = f"{text[:max_chars]}... [{len(text) - max_chars} more characters]", None
        return record

    capped.capped_at, capped.wrapped = max_chars, make  # type: ignore[attr-defined]
    logging.setLogRecordFactory(capped)
