"""A headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``):
no websocket library and no browser download, just Debian's ``chromium``.

    with Browser() as b:
        page = b.open(Path("page.html").as_uri(), width=1280)
        page.evaluate("document.title")
        page.click("td.cell.marked"); page.key("ArrowDown")
        page.screenshot(Path("shot.png"))
        page.console  # every console message and uncaught exception, as text

Used by the report's browser tests and by benchmarks/report.py (render time).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--remote-debugging-pipe")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class BrowserError(RuntimeError):
    pass


class Browser:
    def __init__(self, timeout: float = 60.0) -> None:
        exe = chromium()
        if exe is None:
            raise BrowserError("no chromium on PATH")
        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="specguard-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds() -> None:  # the protocol lives on the child's fds 3 (in) and 4 (out)
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=fds, pass_fds=(3, 4))  # kept open past preexec_fn's dup2
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self._events: list[dict] = []

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(BrowserError, OSError):
            self.send("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)

    # -- the protocol: JSON messages separated by NUL bytes ---------------------------------------

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        want = self._id
        while True:
            m = self._read()
            if m.get("id") == want:
                if "error" in m:
                    raise BrowserError(f"{method}: {m['error']}")
                return m.get("result", {})
            self._events.append(m)

    def _read(self) -> dict:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("chromium did not answer in time")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise BrowserError("chromium closed the pipe")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def wait_event(self, method: str, session: str) -> dict:
        for i, m in enumerate(self._events):
            if m.get("method") == method and m.get("sessionId") == session:
                return self._events.pop(i)
        while True:
            m = self._read()
            if m.get("method") == method and m.get("sessionId") == session:
                return m
            self._events.append(m)

    def open(self, url: str, *, width: int = 1280, height: int = 900, mobile: bool = False) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}, session)
        self.send("Page.navigate", {"url": url}, session)
        self.wait_event("Page.loadEventFired", session)
        return page


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.b = browser
        self.session = session

    def evaluate(self, expression: str) -> Any:
        r = self.b.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, self.session)
        if "exceptionDetails" in r:
            raise BrowserError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def click(self, selector: str) -> None:
        box = self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                            "e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); "
                            "return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.b.send("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], "button": "left",
                                                     "clickCount": 1}, self.session)

    def key(self, key: str) -> None:
        """A key press as the keyboard sends it (focus-following, default actions included)."""
        codes = {"Enter": 13, "Tab": 9, " ": 32, "ArrowLeft": 37, "ArrowUp": 38, "ArrowRight": 39,
                 "ArrowDown": 40}
        base = {"key": key, "code": "Space" if key == " " else key, "windowsVirtualKeyCode": codes[key]}
        text = {"Enter": "\r", " ": " "}.get(key)
        self.b.send("Input.dispatchKeyEvent", {"type": "keyDown" if text else "rawKeyDown", **base,
                                               **({"text": text} if text else {})}, self.session)
        self.b.send("Input.dispatchKeyEvent", {"type": "keyUp", **base}, self.session)

    def screenshot(self, path: Path) -> None:
        r = self.b.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False}, self.session)
        path.write_bytes(base64.b64decode(r["data"]))

    @property
    def console(self) -> list[str]:
        """Console messages, uncaught exceptions and browser log errors seen so far on this page."""
        out = []
        for m in self.b._events:
            if m.get("sessionId") != self.session:
                continue
            p = m.get("params", {})
            if m.get("method") == "Runtime.consoleAPICalled":
                out.append(f"console.{p.get('type')}: " + " ".join(str(a.get("value", a.get("description")))
                                                                    for a in p.get("args", [])))
            elif m.get("method") == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
            elif m.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
                e = p["entry"]
                out.append(f"log.{e.get('level')}: {e.get('text')} {e.get('url', '')}")
        return out
