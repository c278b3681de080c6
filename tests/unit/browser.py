"""A real headless browser for the report's tests: Debian's chromium driven through the DevTools
protocol over a pipe (--remote-debugging-pipe: JSON messages ending in NUL on fds 3 and 4, no port,
no third-party driver). Every read is bounded by a deadline; the browser is killed at the end.

    with Browser() as b:
        page = b.open(path)          # console messages, exceptions, log errors and requests it saw
        b.evaluate("document.title")
        b.screenshot(png_path)
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_browser() -> str | None:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(Exception):
    pass


class Browser:
    def __init__(self, timeout: float = 60.0, width: int = 1400, height: int = 1000) -> None:
        self.timeout = timeout
        self.width, self.height = width, height
        self.proc: subprocess.Popen | None = None
        self._next = 0
        self._buf = b""
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None

    def __enter__(self) -> "Browser":
        exe = find_browser()
        if exe is None:
            raise BrowserError("no chromium")
        self.profile = tempfile.mkdtemp(prefix="provision-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # the browser reads commands on fd 3 and writes answers on fd 4
        os.set_inheritable(to_browser_r, True)
        os.set_inheritable(from_browser_w, True)

        def fds():
            # out of the way first: either pipe end may already be fd 3 or 4
            r, w = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        argv = [exe, "--headless", "--disable-gpu", "--no-sandbox", "--remote-debugging-pipe", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
                "--disable-sync", "--disable-component-update", "--mute-audio", f"--user-data-dir={self.profile}",
                f"--window-size={self.width},{self.height}", "about:blank"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=fds, pass_fds=(3, 4), close_fds=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                         "deviceScaleFactor": 1, "mobile": False})
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.proc and self.proc.poll() is None:
                self._send({"id": self._id(), "method": "Browser.close"})
                self.proc.wait(timeout=10)
        except Exception:
            pass
        finally:
            if self.proc and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
            for fd in (self._to_browser, self._from_browser):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self.profile, ignore_errors=True)

    # ---- the protocol
    def _id(self) -> int:
        self._next += 1
        return self._next

    def _send(self, msg: dict[str, Any]) -> None:
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("the browser did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc else ""
                raise BrowserError(f"the browser closed the pipe: {err}")
            self._buf += chunk
        raw, _, self._buf = self._buf.partition(b"\0")
        return json.loads(raw)

    def call(self, method: str, params: dict[str, Any] | None = None, session: bool = True,
             timeout: float | None = None) -> dict[str, Any]:
        msg_id = self._id()
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        self._send(msg)
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            msg = self._read(deadline)
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_for(self, method: str, timeout: float | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + (timeout or self.timeout)
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        while True:
            msg = self._read(deadline)
            if "method" in msg:
                self.events.append(msg)
                if msg["method"] == method:
                    return msg

    # ---- what the tests use
    def open(self, path: Path) -> dict[str, list]:
        """Load a file and wait for its load event -> {errors, console, requests}."""
        self.events.clear()
        self.call("Page.navigate", {"url": path.resolve().as_uri()})
        self.wait_for("Page.loadEventFired")
        self.call("Runtime.evaluate", {"expression": "new Promise(r => requestAnimationFrame(() => r(1)))",
                                       "awaitPromise": True})
        errors, console, requests = [], [], []
        for ev in self.events:
            m, p = ev["method"], ev.get("params", {})
            if m == "Runtime.exceptionThrown":
                errors.append(p["exceptionDetails"].get("exception", {}).get("description")
                              or p["exceptionDetails"].get("text"))
            elif m == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                console.append(f"{p.get('type')}: {text}")
                if p.get("type") in ("error", "assert"):
                    errors.append(text)
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                errors.append(f"{p['entry'].get('source')}: {p['entry'].get('text')}")
            elif m == "Network.requestWillBeSent":
                requests.append(p["request"]["url"])
        return {"errors": errors, "console": console, "requests": requests}

    def evaluate(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in res:
            raise BrowserError(f"{expression}: {res['exceptionDetails'].get('text')}")
        return res["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        height = int(self.evaluate("document.documentElement.scrollHeight") or self.height)
        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                    "clip": {"x": 0, "y": 0, "width": self.width,
                                                             "height": min(height, 16000), "scale": 1}})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
