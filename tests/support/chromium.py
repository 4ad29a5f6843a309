"""A minimal headless-Chromium driver over the DevTools protocol on a pipe (standard library only).

Chromium started with ``--remote-debugging-pipe`` reads DevTools commands from fd 3 and writes replies and events
to fd 4, each a JSON message ended by a NUL byte. That is all a test needs to load a page, watch its console,
click, read the DOM and take a screenshot, with no websocket client and no browser-automation package.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_browser() -> str | None:
    return next((p for b in BROWSERS if (p := shutil.which(b))), None)


class Chromium:
    """One headless browser with one page (``with Chromium() as b: b.open(url)``)."""

    def __init__(self, binary: str | None = None, width: int = 1280, height: int = 900):
        binary = binary or find_browser()
        if binary is None:
            raise FileNotFoundError("no chromium binary on PATH")
        self.profile = tempfile.mkdtemp(prefix="r2v-chromium-")
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()

        def fds() -> None:  # the child's fd 3 reads our commands, fd 4 writes its replies
            import fcntl

            # via fds >= 10 first: a pipe end may itself be fd 3 or 4, and dup2 onto itself would keep CLOEXEC
            a, b = fcntl.fcntl(to_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [binary, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
                "--disable-dev-shm-usage", f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
                "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=fds, close_fds=False)  # noqa: PLW1509 - no threads here
        os.close(to_r)
        os.close(from_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)

    # --------------------------------------------------------------------------------------------- protocol
    def _read(self, timeout: float) -> dict[str, Any]:
        import select

        end = time.monotonic() + timeout
        while b"\0" not in self._buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self._from_r], [], [], left)[0]:
                raise TimeoutError("no reply from chromium")
            data = os.read(self._from_r, 1 << 20)
            if not data:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buf += data
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: str | None = None, timeout: float = 60, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events that arrive meanwhile are kept in ``events``)."""
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read(timeout)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """A command to the page's session."""
        return self.call(method, session=self.session, **params)

    # ------------------------------------------------------------------------------------------------ page
    def open(self, url: str, timeout: float = 60) -> float:
        """Navigate and wait for the load event; returns the seconds it took."""
        start = time.monotonic()
        self.events.clear()
        self.send("Page.navigate", url=url)
        end = start + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._read(end - time.monotonic()))
        return time.monotonic() - start

    def eval(self, expression: str, timeout: float = 60) -> Any:
        """The value of a JavaScript expression (promises awaited); a thrown error raises."""
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True,
                      timeout=timeout * 1000)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page error: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30) -> Any:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            v = self.eval(expression)
            if v:
                return v
            time.sleep(0.05)
        raise TimeoutError(f"still false after {timeout} s: {expression}")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries seen so far."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(json.dumps(p.get("exceptionDetails", {}))[:500])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def dialogs(self) -> list[dict[str, Any]]:
        """JavaScript dialogs (``alert``...) the page opened: an injected script that ran would show here."""
        return [e["params"] for e in self.events if e.get("method") == "Page.javascriptDialogOpening"]

    def screenshot(self, path: str | os.PathLike, full_page: bool = False) -> int:
        """Save a PNG of the viewport (or the whole page); returns its size in bytes."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        data = base64.b64decode(self.send("Page.captureScreenshot", **params)["data"])
        with open(path, "wb") as fh:
            fh.write(data)
        return len(data)

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except (OSError, RuntimeError, TimeoutError):  # the browser is already gone
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_w, self._from_r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
