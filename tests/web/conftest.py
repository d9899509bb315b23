"""Browser fixtures: one Chromium per module, a logged-in page per test that records
console errors, and a screenshot of the page when a test fails (its path is printed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

from web.web_support import WebServer, chromium_path, web_server


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One Chromium per test module: Playwright's sync API holds an event loop in this
    thread until it stops, which asyncio tests that come after it in this process (the
    order pytest-xdist gives them) could not run beside."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def server(fresh_db: str, tmp_path: Path) -> Iterator[WebServer]:
    with web_server(fresh_db, tmp_path) as s:
        yield s


class Console:
    """The console errors and uncaught page errors seen by a page."""

    def __init__(self, page: Page) -> None:
        self.errors: list[str] = []
        page.on("console", self._message)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))

    def _message(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"{message.text} ({message.location.get('url')})")


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Page]:
    """A fresh browser context and page; a screenshot on failure."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.console = Console(page)  # type: ignore[attr-defined]
    yield page
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        shot = tmp_path / "failure.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot of the failing page: {shot} ({page.url})")
    context.close()
