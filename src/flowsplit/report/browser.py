"""Open a report in headless Chromium and check that it renders.

Loads an HTML file through the DevTools protocol, then reports: whether the load
event fired, each image's natural size (0 means it failed to decode), console
errors, uncaught exceptions and failed requests; optionally saves a full-page
screenshot. Needs only a ``chromium`` binary: the DevTools websocket is spoken by a
minimal standard-library client, so nothing else must be installed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from flowsplit.util import typed_from_dict

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1280,1600",
)


def find_chromium() -> str | None:
    """Path of a Chromium-family browser, or None. ``FLOWSPLIT_CHROMIUM`` overrides."""
    env = os.environ.get("FLOWSPLIT_CHROMIUM")
    if env:
        return env if Path(env).exists() else None
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class BrowserCheck:
    """What the browser saw."""

    loaded: bool = False
    images: list[dict] = field(default_factory=list)
    """One entry per ``<img>``: ``alt``, ``natural_width``, ``natural_height``."""
    console_errors: list[str] = field(default_factory=list)
    title: str = ""
    screenshot: str | None = None
    height: int = 0
    """Height of the whole page in CSS pixels at the window's width (1280 px)."""
    verdict: str | None = None
    """Text of the page's first ``.verdict`` element (its one-line answer), if any."""
    verdict_top: float | None = None
    """Distance of that verdict from the top of the page, px."""
    first_image_top: float | None = None
    """Distance of the page's first image from the top of the page, px."""

    @property
    def broken_images(self) -> list[dict]:
        return [i for i in self.images if i["natural_width"] <= 0]

    @property
    def ok(self) -> bool:
        return self.loaded and not self.broken_images and not self.console_errors


class _WebSocket:
    """Just enough RFC 6455 for DevTools: masked text frames out, any frames in."""

    def __init__(self, url: str, timeout: float):
        u = urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"DevTools refused the websocket: {head[:80]!r}")
        self.buf = head.split(b"\r\n\r\n", 1)[1]

    def send(self, text: str) -> None:
        data = text.encode()
        n = len(data)
        header = bytes([0x81])
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(header + mask + body)

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("DevTools connection closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self) -> str:
        parts = []
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            if b0 & 0x0F == 0x8:
                raise ConnectionError("DevTools closed the websocket")
            if b0 & 0x0F in (0x9, 0xA):  # ping/pong: nothing to do for a short session
                continue
            parts.append(payload)
            if b0 & 0x80:
                return b"".join(parts).decode("utf-8", errors="replace")

    def close(self) -> None:
        self.sock.close()


class _DevTools:
    def __init__(self, ws: _WebSocket):
        self.ws = ws
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params or {}}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, method: str, deadline: float) -> bool:
        if any(e.get("method") == method for e in self.events):
            return True
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            self.events.append(msg)
            if msg.get("method") == method:
                return True
        return False


def _page_ws_url(port: int, deadline: float) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while time.monotonic() < deadline:
        try:
            with opener.open(f"http://127.0.0.1:{port}/json/list", timeout=2) as resp:
                targets = json.loads(resp.read())
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError("Chromium started but offered no page to debug")


def _console_errors(events: list[dict]) -> list[str]:
    errors = []
    for e in events:
        method, p = e.get("method"), e.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append(
                " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"])
            )
        elif method == "Runtime.exceptionThrown":
            details = p.get("exceptionDetails", {})
            errors.append(details.get("exception", {}).get("description") or details.get("text"))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            errors.append(p["entry"].get("text", ""))
    return errors


@dataclass
class PageProbe:
    """What :data:`PROBE` returns: the :class:`BrowserCheck` fields read from the page."""

    title: str
    images: list[dict[str, Any]]
    height: int
    verdict: str | None
    verdict_top: float | None
    first_image_top: float | None


PROBE = """(() => {
  const top = e => e ? e.getBoundingClientRect().top + window.scrollY : null;
  const v = document.querySelector('.verdict');
  return JSON.stringify({
    title: document.title,
    images: Array.from(document.images).map(i => ({alt: i.alt,
      natural_width: i.naturalWidth, natural_height: i.naturalHeight})),
    height: Math.max(document.documentElement.scrollHeight, document.body.scrollHeight),
    verdict: v ? v.innerText.trim() : null,
    verdict_top: top(v),
    first_image_top: top(document.images[0]),
  });
})()"""
"""What the page is asked once it has loaded (one JSON string back)."""


def check_page(
    html_path: str | Path,
    *,
    screenshot: str | Path | None = None,
    chromium: str | None = None,
    timeout_s: float = 60.0,
) -> BrowserCheck:
    """Load ``html_path`` in headless Chromium and report what rendered.

    Raises FileNotFoundError when no Chromium is installed, TimeoutError when it
    does not come up or the page does not load in ``timeout_s``.
    """
    binary = chromium or find_chromium()
    if binary is None:
        raise FileNotFoundError("no chromium binary found (apt-get install chromium)")
    url = Path(html_path).resolve().as_uri()
    deadline = time.monotonic() + timeout_s
    # Chromium's helper processes can still write into the scratch profile for a moment
    # after the browser process ended ("Directory not empty" on removal, seen under
    # load): a profile left behind in the temp folder must not fail the check.
    with tempfile.TemporaryDirectory(
        prefix="flowsplit-chromium-", ignore_cleanup_errors=True
    ) as profile:
        proc = subprocess.Popen(
            [
                binary,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        ws = None
        try:
            port = _devtools_port(proc, Path(profile), deadline)
            ws = _WebSocket(_page_ws_url(port, deadline), timeout=timeout_s)
            return _inspect(_DevTools(ws), url, deadline, screenshot)
        finally:
            if ws is not None:
                ws.close()
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _devtools_port(proc: subprocess.Popen, profile: Path, deadline: float) -> int:
    """The DevTools port the Chromium of ``proc`` writes into its ``profile``, once it has."""
    port_file = profile / "DevToolsActivePort"
    while not port_file.exists() or not port_file.read_text().strip():
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with status {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError("chromium did not open its DevTools port")
        time.sleep(0.05)
    return int(port_file.read_text().split()[0])


def _inspect(
    cdp: _DevTools, url: str, deadline: float, screenshot: str | Path | None
) -> BrowserCheck:
    """Load ``url`` in the page behind ``cdp`` and report what rendered (:data:`PROBE`),
    the console's errors and failed requests; a full-page screenshot when asked."""
    for domain in ("Page", "Runtime", "Log", "Network"):
        cdp.call(f"{domain}.enable")
    cdp.call("Page.navigate", {"url": url})
    result = BrowserCheck(loaded=cdp.wait_for("Page.loadEventFired", deadline))
    value = cdp.call("Runtime.evaluate", {"expression": PROBE, "returnByValue": True})
    probe = typed_from_dict(PageProbe, json.loads(value["result"]["value"]), "probe")
    for f in fields(probe):  # the probe's fields are the check's
        setattr(result, f.name, getattr(probe, f.name))
    failed = [
        f"request failed: {e['params'].get('errorText', '')}"
        for e in cdp.events
        if e.get("method") == "Network.loadingFailed"
    ]
    result.console_errors = [*_console_errors(cdp.events), *failed]
    if screenshot is not None:
        shot = cdp.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        Path(screenshot).write_bytes(base64.b64decode(shot["data"]))
        result.screenshot = str(screenshot)
    return result
