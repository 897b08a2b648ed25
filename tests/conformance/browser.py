"""Render a local HTML page in headless Chromium over the DevTools protocol (test helper).

No browser-automation framework: Debian's ``chromium`` is started with ``--remote-debugging-port=0``, the
port is read from ``DevToolsActivePort`` in its throw-away profile, and a minimal RFC 6455 websocket client
(stdlib only, below) speaks the DevTools protocol. For each page we collect everything the browser reports
as an error (``console.error``/``console.assert`` calls, uncaught exceptions, ``Log`` entries of level
``error`` such as failed resource loads), evaluate a few expressions, and save a full-page PNG screenshot.

Every wait is bounded by a deadline; the browser's whole process group is ended on exit, also on failure.
Failures are raised as :class:`~conformance.core.errors.HarnessError` with one line naming what and where.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from conformance.core.errors import HarnessError

#: where Debian 12 puts the browser (package ``chromium``)
CHROMIUM_CANDIDATES = ("chromium", "/usr/bin/chromium", "chromium-browser")

_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
    "--remote-debugging-port=0",
)

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_WS_ACCEPT_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, section 1.3


def find_chromium() -> str | None:
    """The Chromium executable on PATH (or at Debian's location), or None."""
    for name in CHROMIUM_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG file; HarnessError when it is not a PNG."""
    head = path.read_bytes()[:24]
    if len(head) < 24 or not head.startswith(_PNG_SIGNATURE) or head[12:16] != b"IHDR":
        raise HarnessError(f"{path}: not a PNG file")
    width, height = struct.unpack(">II", head[16:24])
    return width, height


# ----------------------------------------------------------------------------------------------------------
# A minimal websocket client (text frames, client-side masking, fragmentation, ping/pong, close)


class _Deadline:
    def __init__(self, seconds: float, what: str) -> None:
        self.end = time.monotonic() + seconds
        self.what = what

    def left(self) -> float:
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise HarnessError(f"chromium: timed out {self.what}")
        return remaining


class _WebSocket:
    def __init__(self, host: str, port: int, path: str, deadline: _Deadline) -> None:
        self._sock = socket.create_connection((host, port), timeout=deadline.left())
        self._buffer = b""
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self._sock.sendall(request.encode())
        while b"\r\n\r\n" not in self._buffer:
            self._fill(deadline)
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        if not lines[0].startswith("HTTP/1.1 101"):
            raise HarnessError(f"chromium: websocket handshake on port {port} refused: {lines[0]}")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        accept = base64.b64encode(hashlib.sha1((key + _WS_ACCEPT_GUID).encode()).digest()).decode()
        if headers.get("sec-websocket-accept") != accept:
            raise HarnessError(f"chromium: websocket handshake on port {port}: bad Sec-WebSocket-Accept")

    def _fill(self, deadline: _Deadline) -> None:
        self._sock.settimeout(deadline.left())
        try:
            chunk = self._sock.recv(1 << 16)
        except TimeoutError:
            deadline.left()  # raises when the deadline has passed
            return
        if not chunk:
            raise HarnessError("chromium: the DevTools connection closed unexpectedly")
        self._buffer += chunk

    def _take(self, n: int, deadline: _Deadline) -> bytes:
        while len(self._buffer) < n:
            self._fill(deadline)
        data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        if n < 126:
            header = struct.pack(">BB", 0x80 | opcode, 0x80 | n)
        elif n < 1 << 16:
            header = struct.pack(">BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            header = struct.pack(">BBQ", 0x80 | opcode, 0x80 | 127, n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self._sock.sendall(header + mask + masked)

    def send_text(self, text: str) -> None:
        self._send_frame(0x1, text.encode())

    def recv_text(self, deadline: _Deadline) -> str:
        message = b""
        while True:
            first, second = self._take(2, deadline)
            fin, opcode, n = first & 0x80, first & 0x0F, second & 0x7F
            if n == 126:
                (n,) = struct.unpack(">H", self._take(2, deadline))
            elif n == 127:
                (n,) = struct.unpack(">Q", self._take(8, deadline))
            mask = self._take(4, deadline) if second & 0x80 else b""
            payload = self._take(n, deadline)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x8:
                raise HarnessError("chromium: the DevTools connection was closed by the browser")
            if opcode == 0x9:
                self._send_frame(0xA, payload)
                continue
            if opcode == 0xA:
                continue
            message += payload
            if fin:
                return message.decode()

    def close(self) -> None:
        try:
            self._send_frame(0x8, b"")
        except OSError:
            pass
        self._sock.close()


# ----------------------------------------------------------------------------------------------------------
# DevTools protocol


@dataclass
class PageReport:
    """What the browser reported for one page."""

    url: str
    screenshot: Path
    #: one line per console error, uncaught exception or error log entry, in arrival order
    errors: list[str] = field(default_factory=list)
    #: the value of each expression passed to :meth:`Chromium.render`, by name
    values: dict[str, Any] = field(default_factory=dict)


def _describe(method: str, params: Mapping[str, Any]) -> str | None:
    """One line for an event that reports an error, None for any other event."""
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        args = params.get("args", [])
        text = " ".join(str(a.get("value", a.get("description", a.get("type", "?")))) for a in args)
        return f"console.{params['type']}: {text}"
    if method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails", {})
        exc = details.get("exception", {})
        text = exc.get("description") or details.get("text", "exception")
        where = f"{details.get('url', '')}:{details.get('lineNumber', 0) + 1}"
        return f"uncaught exception at {where}: {str(text).splitlines()[0]}"
    if method == "Log.entryAdded":
        entry = params.get("entry", {})
        if entry.get("level") == "error":
            return f"log error ({entry.get('source', '?')}): {entry.get('text', '')} {entry.get('url', '')}"
    return None


class Chromium:
    """One headless Chromium process; use as a context manager, then :meth:`render` pages."""

    def __init__(self, executable: str | None = None, *, timeout_s: float = 20.0) -> None:
        found = executable or find_chromium()
        if found is None:
            raise HarnessError("chromium not found on PATH (Debian package `chromium`)")
        self.executable = found
        self.timeout_s = timeout_s
        self._profile: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._ws: _WebSocket | None = None
        self._next_id = 0
        self._events: list[tuple[str | None, str, dict[str, Any]]] = []

    # -- process lifetime ----------------------------------------------------------------------------------

    def __enter__(self) -> Chromium:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _start(self) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="profharness-chromium-")
        profile = Path(self._profile.name)
        stderr = (profile / "stderr.txt").open("wb")
        try:
            self._proc = subprocess.Popen(
                [self.executable, *_FLAGS, f"--user-data-dir={profile}", "about:blank"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,  # its own process group, so close() can end every child
            )
        except OSError as exc:
            raise HarnessError(f"chromium: cannot start {self.executable}: {exc}") from exc
        finally:
            stderr.close()
        deadline = _Deadline(self.timeout_s, f"waiting for {profile}/DevToolsActivePort")
        port_file = profile / "DevToolsActivePort"
        while True:
            lines = port_file.read_text().splitlines() if port_file.is_file() else []
            if len(lines) >= 2:
                break
            if self._proc.poll() is not None:
                tail = (profile / "stderr.txt").read_text(errors="replace").strip().splitlines()[-1:]
                raise HarnessError(
                    f"chromium exited with code {self._proc.returncode} before DevTools was ready: "
                    f"{tail[0] if tail else '(no output)'}"
                )
            deadline.left()
            time.sleep(0.05)
        port, path = int(lines[0]), lines[1]
        self._ws = _WebSocket("127.0.0.1", port, path, _Deadline(self.timeout_s, "connecting to DevTools"))

    def close(self) -> None:
        """End the browser (its whole process group) and remove its profile. Safe to call twice."""
        if self._ws is not None:
            self._ws.close()
            self._ws = None
        proc, self._proc = self._proc, None
        if proc is not None:
            for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait_s)
                except subprocess.TimeoutExpired:
                    continue
                # the main process is gone; make sure no helper of its group lingers
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                break
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5.0)
        if self._profile is not None:
            self._profile.cleanup()
            self._profile = None

    # -- protocol ------------------------------------------------------------------------------------------

    def _call(
        self, method: str, params: Mapping[str, Any] | None, session: str | None, deadline: _Deadline
    ) -> dict[str, Any]:
        if self._ws is None:
            raise HarnessError(f"chromium: {method} called on a browser that is not running")
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": dict(params or {})}
        if session is not None:
            message["sessionId"] = session
        self._ws.send_text(json.dumps(message))
        while True:
            reply = json.loads(self._ws.recv_text(deadline))
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise HarnessError(f"chromium: {method} failed: {reply['error'].get('message', reply)}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            if "method" in reply:
                self._events.append((reply.get("sessionId"), reply["method"], reply.get("params", {})))

    def _wait_event(self, method: str, session: str, since: int, deadline: _Deadline) -> int:
        """Wait for an event of this session at or after index ``since``; returns the index after it."""
        if self._ws is None:
            raise HarnessError(f"chromium: waiting for {method} on a browser that is not running")
        seen = since
        while True:
            for i, (sid, name, _) in enumerate(self._events[seen:], start=seen):
                if sid == session and name == method:
                    return i + 1
            seen = len(self._events)
            reply = json.loads(self._ws.recv_text(deadline))
            if "method" in reply:
                self._events.append((reply.get("sessionId"), reply["method"], reply.get("params", {})))

    def render(
        self,
        page: Path,
        *,
        screenshot: Path | None = None,
        evaluate: Mapping[str, str] | None = None,
        width: int = 1280,
        height: int = 900,
        settle_s: float = 0.2,
    ) -> PageReport:
        """Load ``page`` (a local file), report its errors, evaluate expressions, take a full-page PNG.

        ``screenshot`` defaults to the page's path with the suffix ``.png``. ``settle_s`` is how long to
        keep listening after the load event, so late errors (timers, failed late loads) are caught.
        """
        page = page.resolve()
        if not page.is_file():
            raise HarnessError(f"{page}: no such page to render")
        shot = screenshot or page.with_suffix(".png")
        url = page.as_uri()
        deadline = _Deadline(self.timeout_s, f"rendering {page}")
        target = self._call("Target.createTarget", {"url": "about:blank"}, None, deadline)["targetId"]
        try:
            session = self._call(
                "Target.attachToTarget", {"targetId": target, "flatten": True}, None, deadline
            )["sessionId"]
            for domain in ("Runtime", "Log", "Page"):
                self._call(f"{domain}.enable", None, session, deadline)
            self._call(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                session,
                deadline,
            )
            first_event = len(self._events)
            nav = self._call("Page.navigate", {"url": url}, session, deadline)
            if nav.get("errorText"):
                raise HarnessError(f"chromium: cannot load {url}: {nav['errorText']}")
            # a load event may still be the initial about:blank's: wait until the page itself has loaded
            since = first_event
            while True:
                since = self._wait_event("Page.loadEventFired", session, since, deadline)
                here = self._evaluate("[location.href, document.readyState]", session, deadline)
                if here == [url, "complete"]:
                    break
            time.sleep(min(settle_s, deadline.left()))
            values = {
                name: self._evaluate(expr, session, deadline) for name, expr in (evaluate or {}).items()
            }
            metrics = self._call("Page.getLayoutMetrics", None, session, deadline)
            content = metrics.get("cssContentSize") or metrics["contentSize"]
            clip = {
                "x": 0,
                "y": 0,
                "width": max(width, int(content["width"])),
                "height": max(1, int(content["height"])),
                "scale": 1,
            }
            data = self._call(
                "Page.captureScreenshot",
                {"format": "png", "clip": clip, "captureBeyondViewport": True},
                session,
                deadline,
            )["data"]
            shot.write_bytes(base64.b64decode(data))
            errors = [
                line
                for sid, method, params in self._events[first_event:]
                if sid == session and (line := _describe(method, params)) is not None
            ]
            return PageReport(url=url, screenshot=shot, errors=errors, values=values)
        finally:
            if self._ws is not None:
                try:
                    self._call("Target.closeTarget", {"targetId": target}, None, _Deadline(5.0, "closing"))
                except (HarnessError, OSError):
                    pass
            self._events.clear()

    def _evaluate(self, expression: str, session: str, deadline: _Deadline) -> Any:
        result = self._call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session, deadline
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text", "exception")
            raise HarnessError(f"chromium: evaluating {expression!r} threw: {str(text).splitlines()[0]}")
        return result.get("result", {}).get("value")


def render(page: Path, **kwargs: Any) -> PageReport:
    """Start Chromium, render one page (see :meth:`Chromium.render`), end Chromium."""
    with Chromium() as browser:
        return browser.render(page, **kwargs)
