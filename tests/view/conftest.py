"""A headless browser for the page's tests: Debian's chromium through playwright (`nemo_polar.view.browser`)."""

from __future__ import annotations

import pytest

from nemo_polar.view.browser import Console, headless, missing


@pytest.fixture(scope="module")
def browser():
    why = missing()
    if why is not None:
        pytest.skip(why)
    with headless() as b:
        yield b


class Page:
    """A fresh page and what its console said; `clean()` fails on any console error."""

    def __init__(self, browser, base_url: str, width: int = 1400, height: int = 900):
        self.page = browser.new_page(viewport={"width": width, "height": height})
        self.console = Console(self.page)
        self.base = base_url

    def go(self, path: str = "/"):
        self.page.goto(self.base + path)
        return self.page

    def clean(self) -> None:
        assert self.console.errors == [], self.console.errors

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def open_page(browser):
    pages: list[Page] = []

    def make(base_url: str, **kw) -> Page:
        pages.append(Page(browser, base_url, **kw))
        return pages[-1]

    yield make
    for p in pages:
        p.clean()  # whatever a test did, the page logged no error
        p.close()
