"""Headless Chromium through Playwright for the browser tests: Debian's ``chromium``, never a download.

`launch` starts it with the flags that keep it from reaching the network on its own; `PageLog` records every
request URL and every JavaScript error (console errors and uncaught exceptions) of a page.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

import pytest

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    """Debian's chromium (or ``$CHROMIUM``); fails the test with the install command when it is missing."""
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(path):
        pytest.fail("Chromium is not installed, and the browser tests need it: run 'make chromium' (apt-get)")
    return path


def launch(playwright):
    """A headless Chromium browser from Debian's package."""
    return playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True)


@dataclass
class PageLog:
    """Request URLs and JavaScript errors seen on a page (attach with `watch`)."""

    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def watch(self, page) -> PageLog:
        page.on("request", lambda request: self.requests.append(request.url))
        page.on("console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda err: self.errors.append(str(err)))
        return self

    def leaving(self, allowed: tuple[str, ...]) -> list[str]:
        """Request URLs that start with none of ``allowed``."""
        return [url[:120] for url in self.requests if not url.startswith(allowed)]
