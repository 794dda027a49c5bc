"""A real headless Chromium, the distribution's (scripts/install-browser.sh), driven by Playwright."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

#: What Chromium needs to start here as root and headless, and to stay off the network it cannot reach.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-default-apps",
]  # fmt: skip


def chromium() -> str:
    """The browser's path: $DECK_CHROMIUM, else `chromium` on the PATH; a clear failure when there is none."""
    found = os.environ.get("DECK_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("no Chromium here: install it with `bash scripts/install-browser.sh` (Debian's chromium package)")
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One browser for a module's tests; Playwright's loop ends with it, before another module's asyncio tests."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A page of a context of its own (its own sessionStorage), desktop size; what it logged is checked."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    opened.errors = []
    opened.on("pageerror", lambda error: opened.errors.append(str(error)))
    opened.set_default_timeout(20000)
    yield opened
    errors = opened.errors
    context.close()
    assert not errors, errors
