"""A minimal headless-Chromium driver for the browser tests: the DevTools protocol over ``--remote-debugging-pipe``
(no socket, no extra dependency), and a stdlib PNG decoder for looking at screenshots.

`open_page` loads a ``file://`` URL and reports every request the page made, every JavaScript exception or
console/log error, and a screenshot.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
    "--remote-debugging-pipe",
)
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")


def find_chromium() -> str | None:
    """The Chromium binary: ``$CHROMIUM``, else ``chromium`` / ``chromium-browser`` / ``google-chrome`` on PATH."""
    candidates = [os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"]
    return next((path for name in candidates if name and (path := shutil.which(name))), None)


def _high_fd(fd: int) -> int:
    """Move ``fd`` to a close-on-exec descriptor >= 10, so that the child's dup2 onto 3 and 4 cannot clobber it."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class Browser:
    """One headless Chromium process spoken to over the pipe (its fd 3 reads commands, fd 4 writes replies)."""

    def __init__(self, binary: str, profile: Path) -> None:
        cmd_read, self._cmd_write = (_high_fd(fd) for fd in os.pipe())
        self._reply_read, reply_write = (_high_fd(fd) for fd in os.pipe())

        def wire_pipe() -> None:
            os.dup2(cmd_read, 3)
            os.dup2(reply_write, 4)

        self.process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            preexec_fn=wire_pipe,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(cmd_read)
        os.close(reply_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 20) -> dict:
        """Send one command and return its result; raises RuntimeError on a protocol error or a timeout."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._cmd_write, json.dumps(message).encode() + b"\0")
        reply = self._read_until(lambda m: m.get("id") == self._next_id, timeout, method)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, session: str, timeout: float = 20) -> dict:
        """Return the first event ``method`` of ``session`` (already received or arriving within ``timeout``)."""
        for event in self.events:
            if event.get("method") == method and event.get("sessionId") == session:
                return event
        return self._read_until(lambda m: m.get("method") == method and m.get("sessionId") == session, timeout, method)

    def _read_until(self, wanted: Callable[[dict], bool], timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "method" in message:
                    self.events.append(message)
                if wanted(message):
                    return message
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._reply_read], [], [], left)[0]:
                raise RuntimeError(f"Chromium did not answer {what} within {timeout:.0f} s")
            chunk = os.read(self._reply_read, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium exited (code {self.process.poll()}) while waiting for {what}")
            self._buffer += chunk

    def close(self) -> None:
        """Ask Chromium to quit, then end the process if it lingers."""
        try:
            self.send("Browser.close", timeout=5)
        except (RuntimeError, OSError):
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._cmd_write)
        os.close(self._reply_read)


@dataclass
class PageReport:
    """What happened while a page loaded: request URLs, JavaScript errors, the value of the script run after
    it rendered, and a PNG screenshot."""

    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    ready: bool = False
    script_value: object = None
    screenshot: bytes = b""


def _error_text(event: dict) -> str | None:
    """The message of an error event of the page (exception, console.error, error log entry), else None."""
    method, params = event["method"], event.get("params", {})
    if method == "Runtime.exceptionThrown":
        details = params["exceptionDetails"]
        return details.get("exception", {}).get("description") or details.get("text", "exception")
    if method == "Runtime.consoleAPICalled" and params.get("type") == "error":
        return " ".join(str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", []))
    if method == "Log.entryAdded" and params["entry"].get("level") == "error":
        return f"{params['entry'].get('source')}: {params['entry'].get('text')} {params['entry'].get('url', '')}"
    return None


def open_page(
    browser: Browser,
    path: Path,
    ready_js: str,
    script: str | None = None,
    width: int = 1280,
    height: int = 1200,
    timeout: float = 15,
) -> PageReport:
    """Load ``path`` in a new tab, wait until ``ready_js`` evaluates true, then run ``script`` (awaited) and
    screenshot the viewport at quarter scale."""
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    first_event = len(browser.events)
    for domain in ("Page", "Network", "Runtime", "Log"):
        browser.send(f"{domain}.enable", session=session)
    browser.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        session=session,
    )
    browser.send("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
    browser.wait_event("Page.loadEventFired", session, timeout)
    report = PageReport()
    deadline = time.monotonic() + timeout
    while not report.ready and time.monotonic() < deadline:
        result = browser.send("Runtime.evaluate", {"expression": ready_js, "returnByValue": True}, session=session)
        report.ready = result.get("result", {}).get("value") is True
        if not report.ready:
            time.sleep(0.1)
    if script is not None and report.ready:
        params = {"expression": script, "returnByValue": True, "awaitPromise": True}
        report.script_value = browser.send("Runtime.evaluate", params, session=session).get("result", {}).get("value")
    shot = browser.send(
        "Page.captureScreenshot",
        {
            "format": "png",
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 0.25},
        },
        session=session,
    )
    report.screenshot = base64.b64decode(shot["data"])
    for event in browser.events[first_event:]:
        if event.get("sessionId") != session:
            continue
        if event["method"] == "Network.requestWillBeSent":
            report.requests.append(event["params"]["request"]["url"])
        elif (text := _error_text(event)) is not None:
            report.errors.append(text)
    browser.send("Target.closeTarget", {"targetId": target})
    return report


def png_colours(png: bytes) -> tuple[int, float]:
    """Decode an 8-bit RGB/RGBA PNG; return (number of distinct colours, fraction of non-white pixels)."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, header = 8, [], None
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos : pos + 8])
        body = png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = header
    if depth != 8 or colour_type not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG (depth {depth}, colour type {colour_type}, interlace {interlace})")
    bpp = 3 if colour_type == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    previous = bytearray(stride)
    colours, non_white = set(), 0
    for row in range(height):
        kind, line = raw[row * (stride + 1)], bytearray(raw[row * (stride + 1) + 1 : (row + 1) * (stride + 1)])
        _unfilter(kind, line, previous, bpp)
        for x in range(0, stride, bpp):
            pixel = bytes(line[x : x + 3])
            colours.add(pixel)
            non_white += pixel != b"\xff\xff\xff"
        previous = line
    return len(colours), non_white / (width * height)


def _unfilter(kind: int, line: bytearray, previous: bytearray, bpp: int) -> None:
    """Undo one PNG scanline filter in place (0 none, 1 sub, 2 up, 3 average, 4 Paeth)."""
    if kind == 0:
        return
    for i in range(len(line)):
        left = line[i - bpp] if i >= bpp else 0
        up = previous[i]
        if kind == 1:
            line[i] = (line[i] + left) & 0xFF
        elif kind == 2:
            line[i] = (line[i] + up) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            corner = previous[i - bpp] if i >= bpp else 0
            p = left + up - corner
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
            predictor = left if pa <= pb and pa <= pc else up if pb <= pc else corner
            line[i] = (line[i] + predictor) & 0xFF
