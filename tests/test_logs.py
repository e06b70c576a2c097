"""No caller writes megabytes into a log line: every record is capped when it is made."""

from __future__ import annotations

import logging

from nemo_polar import logs


def test_every_log_line_is_capped(caplog):
    logs.install(100)
    try:
        with caplog.at_level(logging.WARNING):
            logging.getLogger("uvicorn.error").warning("bad request body: %s", "x" * (8 * 2**20))
        (record,) = caplog.records
        assert len(record.getMessage()) < 200 and record.getMessage().endswith("more characters]")
        logs.install(100)  # idempotent: not capped twice
        assert logging.getLogRecordFactory().wrapped is logging.LogRecord
    finally:
        logs.install(logs.MAX_LINE)
