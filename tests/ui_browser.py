"""A headless Chromium driven over the Chrome DevTools Protocol, for the status page's tests.

Debian's ``chromium`` (the Makefile's ``install-test`` installs it where it is missing) is
started with ``--remote-debugging-port=0``; the port it picked is read from the profile's
``DevToolsActivePort`` file, and one page target is driven over its websocket (the
``websockets`` package's synchronous client; a reader thread files answers by id and keeps
the events the tests look at). No other moving part: no browser download, no driver binary.

What the tests read from it: every request the page sent (``Network.requestWillBeSent``),
its console errors and uncaught exceptions, JavaScript values (``evaluate``), waits on a
condition in the page (``wait_for``, bounded), and screenshots.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import requests
from servers import wait_for
from websockets.sync.client import ClientConnection, connect

CHROMIUM_NAMES = ("chromium", "chromium-browser")


def chromium_path() -> str:
    """The system Chromium; an error naming the install step when there is none."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found is not None:
            return found
    raise RuntimeError("no chromium on PATH: `make install-test` installs Debian's (apt-get install chromium)")


class Browser:
    """One headless Chromium with one page (use as a context manager)."""

    def __init__(self, workdir: Path, width: int = 1280, height: int = 860) -> None:
        profile = workdir / "chromium-profile"
        profile.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                chromium_path(),
                "--headless",
                "--no-sandbox",  # (tests run as root in CI)
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(workdir / "chromium.log").open("wb"),
        )
        try:
            self._connect(profile / "DevToolsActivePort")
        except BaseException:  # (no ``close`` will come: the browser must not outlive the test)
            self.proc.kill()
            self.proc.wait(timeout=30)
            raise

    def _connect(self, active_port: Path) -> None:
        """Drive the browser's page: its websocket, the reader of its answers and events."""
        port = self._debugging_port(active_port)
        targets = requests.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        page = next(target for target in targets if target["type"] == "page")
        # (entered as its context manager, as the library asks; ``close`` leaves it)
        self.ws: ClientConnection = connect(page["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024).__enter__()
        self._next_id = 0
        self._answers: dict[int, dict[str, Any]] = {}
        self._answered = threading.Condition()
        self.requests: list[str] = []
        """URL of every request the page sent, in order."""
        self.errors: list[str] = []
        """Console errors, uncaught exceptions and error log entries (with their source)."""
        self.loads = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")

    def _debugging_port(self, active_port: Path, timeout_s: float = 30) -> int:
        def written() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            return active_port.exists() and bool(active_port.read_text().strip())

        wait_for(written, timeout_s, message=lambda: "(chromium wrote no DevToolsActivePort)")
        return int(active_port.read_text().split()[0])

    def _read(self) -> None:
        for raw in self.ws:
            message = json.loads(raw)
            if "id" in message:
                with self._answered:
                    self._answers[message["id"]] = message
                    self._answered.notify_all()
            else:
                self._event(message["method"], message.get("params", {}))

    def _event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Network.requestWillBeSent":
            self.requests.append(params["request"]["url"])
        elif method == "Runtime.consoleAPICalled" and params["type"] == "error":
            self.errors.append(
                "console: " + " ".join(str(arg.get("value", arg.get("description"))) for arg in params["args"])
            )
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append("exception: " + details.get("exception", {}).get("description", details["text"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            self.errors.append(f"log ({entry['source']}): {entry['text']} {entry.get('url', '')}")
        elif method == "Page.loadEventFired":
            self.loads += 1

    def send(self, method: str, timeout_s: float = 30, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (an error answer raises)."""
        with self._answered:
            self._next_id += 1
            number = self._next_id
        self.ws.send(json.dumps({"id": number, "method": method, "params": params}))
        with self._answered:
            if not self._answered.wait_for(lambda: number in self._answers, timeout_s):
                raise TimeoutError(f"{method}: no answer within {timeout_s} s")
            answer = self._answers.pop(number)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer["result"]
        return result

    def navigate(self, url: str, timeout_s: float = 30) -> None:
        """Open ``url`` and wait for its load event."""
        loads = self.loads
        self.send("Page.navigate", url=url)
        wait_for(lambda: self.loads != loads, timeout_s, interval_s=0.02, message=lambda: f"({url} did not load)")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float) -> Any:
        """Poll ``expression`` until it is truthy; its value. ``AssertionError`` after ``timeout_s``."""
        value: list[Any] = [None]

        def truthy() -> bool:
            value[0] = self.evaluate(expression)
            return bool(value[0])

        wait_for(truthy, timeout_s, message=lambda: f"(not true: {expression})")  # (``servers.wait_for``)
        return value[0]

    def text(self, selector: str) -> str:
        """The text of the first element ``selector`` matches ("" if none)."""
        found = self.evaluate(f"(document.querySelector({json.dumps(selector)}) || {{}}).innerText || ''")
        return str(found)

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
