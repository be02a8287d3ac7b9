"""Headless Chromium through Playwright for the browser tests: Debian's ``chromium``, never a download.

`launch` starts it with the flags that keep it from reaching the network on its own; `PageLog` records every
request URL and every JavaScript error (console errors and uncaught exceptions) of a page.
"""

from __future__ import annotations

import base64
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


_COUNT_COLOURS = """async (b64) => {
  const image = new Image();
  image.src = 'data:image/png;base64,' + b64;
  await image.decode();
  const canvas = document.createElement('canvas');
  canvas.width = image.width; canvas.height = image.height;
  const context = canvas.getContext('2d');
  context.drawImage(image, 0, 0);
  const data = context.getImageData(0, 0, image.width, image.height).data;
  const colours = new Set();
  let inked = 0;
  for (let i = 0; i < data.length; i += 4) {
    const rgb = (data[i] << 16) | (data[i + 1] << 8) | data[i + 2];
    colours.add(rgb);
    if (rgb !== 0xffffff) inked += 1;
  }
  return [colours.size, inked / (data.length / 4)];
}"""


def png_colours(browser, png: bytes) -> tuple[int, float]:
    """Distinct colours of a PNG screenshot and the fraction of its pixels that are not white, decoded by the
    browser itself (a canvas on a blank page)."""
    page = browser.new_page()
    try:
        colours, inked = page.evaluate(_COUNT_COLOURS, base64.b64encode(png).decode())
    finally:
        page.close()
    return int(colours), float(inked)
