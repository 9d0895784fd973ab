"""The browser of the console's tests: Debian's Chromium driven by Playwright, one per session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.support.local_cli import CHROMIUM, CHROMIUM_ARGS


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"chromium is not installed at {CHROMIUM}: `make test` installs it (make browser-tools)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()
