"""Debian's chromium, headless, driven through playwright (the `dev` extra): for the page's tests and
`polar bench view`. Playwright is pointed at the system's browser and never fetches one of its own.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium() -> Path | None:
    """The system's chromium (`POLAR_CHROMIUM` overrides), or None."""
    named = os.environ.get("POLAR_CHROMIUM")
    found = named or shutil.which("chromium") or "/usr/bin/chromium"
    return Path(found) if Path(found).is_file() else None


def missing() -> str | None:
    """Why no headless page can be driven here, or None when one can."""
    if chromium() is None:
        return "no chromium (scripts/setup.sh system installs Debian's, as root)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is missing (the dev extra: pip install -e .[dev])"
    return None


@contextmanager
def headless() -> Iterator[Any]:
    """A playwright `Browser` on the system's chromium."""
    why = missing()
    if why is not None:
        raise RuntimeError(why)
    from playwright.sync_api import sync_playwright

    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium()), args=list(FLAGS), headless=True)
        try:
            yield browser
        finally:
            browser.close()


class Console:
    """What a page said on its console and what it threw; `errors` must stay empty."""

    def __init__(self, page: Any):
        self.messages: list[tuple[str, str]] = []
        page.on("console", lambda m: self.messages.append((m.type, m.text)))
        page.on("pageerror", lambda e: self.messages.append(("pageerror", str(e))))
        page.on("requestfailed", lambda r: self.messages.append(("requestfailed", f"{r.url}: {r.failure}")))

    @property
    def errors(self) -> list[tuple[str, str]]:
        return [(kind, text) for kind, text in self.messages if kind in ("error", "pageerror", "requestfailed")]


def mark_ms(page: Any, name: str, timeout_ms: float = 120_000) -> float:
    """When the page set performance mark `name`, in ms from the start of its navigation."""
    page.wait_for_function(f"performance.getEntriesByName({name!r}).length > 0", timeout=timeout_ms)
    return page.evaluate(f"performance.getEntriesByName({name!r})[0].startTime")
