"""Run the public Durable Streams conformance suite against a server.

The suite (npm ``@durable-streams/server-conformance-tests``) is the executable
specification of the base protocol, written for Vitest. This module is the
Python side of the harness: it makes sure the pinned npm packages in this
folder are installed, runs ``npx vitest run`` here (``vitest.config.mjs``
points Vitest at the suite inside ``node_modules``), and turns Vitest's JSON
report into a small typed result that tests and scripts can assert on.

It can also start the reference Node server (``@durable-streams/server``, via
``reference_server.mjs``) so that our server can be compared with it.

Standard library only, so it works before any project dependency is installed.

Command line::

    python tests/conformance/runner.py http://127.0.0.1:PORT [--subscriptions]
    python tests/conformance/runner.py --reference   # test the reference server
"""

from __future__ import annotations

import argparse
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from urllib.parse import urlsplit

__all__ = [
    "CONFORMANCE_DIR",
    "ConformanceError",
    "ConformanceResult",
    "FailedTest",
    "ReferenceServer",
    "ensure_installed",
    "run_conformance",
    "start_reference_server",
]

CONFORMANCE_DIR = Path(__file__).resolve().parent
"""This folder: holds package.json, the lockfile, the Vitest config and node_modules."""

# Packages whose presence means `npm ci` has already been run here.
_REQUIRED_PACKAGES = (
    "@durable-streams/server-conformance-tests",
    "@durable-streams/server",
    "vitest",
)

# Vitest's default reporter prints e.g. "Tests  6 failed | 326 passed | 6 skipped (338)".
_SUMMARY_RE = re.compile(r"^\s*Tests\s+.*\(\d+\)\s*$")
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_READY_PREFIX = "READY "


class ConformanceError(RuntimeError):
    """The harness itself could not run (missing tools, no report, timeout).

    Distinct from test failures, which are reported in ConformanceResult, so
    callers can tell "the server is wrong" from "the run did not happen".
    """


@dataclass(frozen=True)
class FailedTest:
    """One failing conformance test.

    ``full_name`` is Vitest's full name (describe blocks and title joined by
    spaces), stable across runs, so it can be used in allow-lists.
    ``error`` is the first line of the first failure message, which for this
    suite is normally the assertion (``expected 404 to be 200``).
    """

    full_name: str
    error: str


@dataclass(frozen=True)
class ConformanceResult:
    """Outcome of one conformance run.

    Counts come from Vitest's JSON report; ``skipped`` includes pending and
    todo tests (the opt-in subscription group shows up there when disabled).
    ``file_errors`` holds errors that happened outside any test (e.g. the
    suite failed to import), which otherwise would look like a clean run with
    zero tests.
    """

    passed: int
    failed: int
    skipped: int
    total: int
    failures: tuple[FailedTest, ...]
    summary: str
    duration_s: float
    returncode: int
    file_errors: tuple[str, ...] = ()
    output: str = field(default="", repr=False)

    @property
    def ok(self) -> bool:
        """True when every test that ran passed and nothing broke outside the tests."""
        return self.failed == 0 and not self.file_errors and self.returncode == 0 and self.passed > 0


def _strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text)


def _first_line(text: str) -> str:
    for line in _strip_ansi(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


def _require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ConformanceError(
            f"`{name}` was not found on PATH. The conformance suite is a Node "
            "package run by Vitest: install Node.js 20 or newer (which brings "
            "npm and npx) and try again."
        )
    return path


def _is_installed() -> bool:
    modules = CONFORMANCE_DIR / "node_modules"
    return all((modules / pkg / "package.json").is_file() for pkg in _REQUIRED_PACKAGES)


def ensure_installed() -> None:
    """Install the pinned npm packages with ``npm ci`` unless already present.

    ``npm ci`` (not ``npm install``) so that exactly the versions recorded in
    package-lock.json are used and the lockfile is never rewritten.

    Raises:
        ConformanceError: node/npm are missing, or ``npm ci`` failed.
    """
    _require_tool("node")
    npm = _require_tool("npm")
    if _is_installed():
        return
    proc = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"],
        cwd=CONFORMANCE_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not _is_installed():
        raise ConformanceError(
            f"`npm ci` in {CONFORMANCE_DIR} failed (exit {proc.returncode}):\n"
            f"{proc.stdout[-4000:]}{proc.stderr[-4000:]}"
        )


def _normalise_base_url(base_url: str) -> str:
    # The suite builds "<base>/v1/stream/<name>"; a trailing slash would give "//v1".
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"base_url must be an http(s) origin, got {base_url!r}")
    return base_url.rstrip("/")


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    """Stop a process we started in its own session, with its children (npx -> node)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=5)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        proc.wait()


def _parse_report(
    report: dict[str, Any],
) -> tuple[int, int, int, int, tuple[FailedTest, ...], tuple[str, ...]]:
    passed = int(report.get("numPassedTests", 0))
    failed = int(report.get("numFailedTests", 0))
    skipped = int(report.get("numPendingTests", 0)) + int(report.get("numTodoTests", 0))
    total = int(report.get("numTotalTests", passed + failed + skipped))
    failures: list[FailedTest] = []
    file_errors: list[str] = []
    for file_result in report.get("testResults", []):
        for assertion in file_result.get("assertionResults", []):
            if assertion.get("status") != "failed":
                continue
            messages = assertion.get("failureMessages") or [""]
            failures.append(
                FailedTest(
                    full_name=str(assertion.get("fullName") or assertion.get("title", "")),
                    error=_first_line(str(messages[0])),
                )
            )
        message = str(file_result.get("message") or "")
        if message.strip():
            file_errors.append(f"{file_result.get('name', '?')}: {_first_line(message)}")
    return passed, failed, skipped, total, tuple(failures), tuple(file_errors)


def run_conformance(
    base_url: str,
    *,
    include_subscriptions: bool = False,
    fetch_headers: dict[str, str] | None = None,
    timeout_s: float = 600,
) -> ConformanceResult:
    """Run the whole conformance suite against ``base_url`` and return its outcome.

    Args:
        base_url: origin of the server under test, e.g. ``http://127.0.0.1:4437``;
            the suite addresses streams as ``/v1/stream/<name>`` below it.
        include_subscriptions: also run the opt-in "Reserved subscription APIs"
            group (sets ``CONFORMANCE_SUBSCRIPTIONS=1`` for vitest.config.mjs).
        fetch_headers: headers every request of the suite carries; with them,
            a redirect fails the request instead of being followed
            (``fetch_setup.mjs``).
        timeout_s: wall-clock limit for the whole Vitest run; a full run takes
            about 35 s, so hitting this means the server hangs.

    Raises:
        ConformanceError: the suite could not be run or produced no report.
        ValueError: ``base_url`` is not an http(s) URL.
    """
    base_url = _normalise_base_url(base_url)
    ensure_installed()
    npx = _require_tool("npx")

    env = dict(os.environ)
    env["CONFORMANCE_TEST_URL"] = base_url
    env["CONFORMANCE_SUBSCRIPTIONS"] = "1" if include_subscriptions else "0"
    env.pop("CONFORMANCE_FETCH_HEADERS", None)
    if fetch_headers is not None:
        env["CONFORMANCE_FETCH_HEADERS"] = json.dumps(fetch_headers)
    env["NO_COLOR"] = "1"
    env.pop("FORCE_COLOR", None)

    with tempfile.TemporaryDirectory(prefix="ds-conformance-") as tmp:
        report_path = Path(tmp) / "report.json"
        cmd = [
            npx,
            "--no",  # never download anything: use the locked local vitest
            "vitest",
            "run",
            "--config",
            str(CONFORMANCE_DIR / "vitest.config.mjs"),
            "--reporter=default",
            "--reporter=json",
            f"--outputFile.json={report_path}",
        ]
        started = time.monotonic()
        # Own session, so a timeout can stop npx and the node process it spawns.
        proc = subprocess.Popen(
            cmd,
            cwd=CONFORMANCE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise ConformanceError(f"conformance run against {base_url} did not finish within {timeout_s} s") from None
        except BaseException:
            _kill_group(proc)
            raise
        duration_s = time.monotonic() - started
        output = _strip_ansi(output)

        try:
            report = json.loads(report_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConformanceError(
                f"Vitest wrote no usable JSON report (exit {proc.returncode}): {exc}\n{output[-4000:]}"
            ) from exc

    passed, failed, skipped, total, failures, file_errors = _parse_report(report)
    summary = next(
        (line.strip() for line in output.splitlines() if _SUMMARY_RE.match(line)),
        f"Tests  {failed} failed | {passed} passed | {skipped} skipped ({total})",
    )
    return ConformanceResult(
        passed=passed,
        failed=failed,
        skipped=skipped,
        total=total,
        failures=failures,
        summary=re.sub(r"\s+", " ", summary),
        duration_s=duration_s,
        returncode=proc.returncode,
        file_errors=file_errors,
        output=output,
    )


class ReferenceServer(subprocess.Popen[bytes]):
    """The reference Node server process, with the URL it announced.

    A Popen subclass so callers keep the full process API; ``url`` is needed
    because port 0 lets the server choose. Used as a context manager it is
    stopped (SIGTERM, then SIGKILL) on exit rather than merely waited for.
    """

    url: str = ""

    def stop(self, timeout_s: float = 10) -> int:
        """Stop the server with SIGTERM (clean shutdown), SIGKILL if it hangs."""
        if self.poll() is None:
            self.send_signal(signal.SIGTERM)
            try:
                self.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                self.wait()
        if self.stdout is not None:
            self.stdout.close()
        return self.returncode

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server (Popen's own __exit__ would only wait for it)."""
        self.stop()
        super().__exit__(exc_type, exc, tb)


def start_reference_server(
    data_dir: str | os.PathLike[str],
    port: int = 0,
    *,
    long_poll_timeout_ms: int | None = 500,
    webhooks: bool = False,
    log: IO[bytes] | int | None = None,
    ready_timeout_s: float = 20,
) -> ReferenceServer:
    """Start ``reference_server.mjs`` and return once it prints ``READY <url>``.

    Args:
        data_dir: directory for the file-backed store (created if missing).
        port: TCP port on 127.0.0.1; 0 picks a free one (see ``.url``).
        long_poll_timeout_ms: server long-poll timeout; 500 ms by default
            because two suite tests wait for the long-poll 204 inside Vitest's
            5 s test timeout (the server's own default is 30 s). None keeps it.
        webhooks: let the server accept ``type=webhook`` subscriptions.
        log: where the server's stderr goes (file object or fd); default is a
            temporary file that is quoted if startup fails. Never a pipe nobody
            reads, which would eventually block the server.
        ready_timeout_s: how long to wait for the READY line.

    Raises:
        ConformanceError: Node is missing, or the server exited or stayed
            silent instead of announcing READY.
    """
    ensure_installed()
    node = _require_tool("node")
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    cmd = [
        node,
        str(CONFORMANCE_DIR / "reference_server.mjs"),
        "--data-dir",
        os.fspath(data_dir),
        "--port",
        str(port),
    ]
    if long_poll_timeout_ms is not None:
        cmd += ["--long-poll-timeout-ms", str(long_poll_timeout_ms)]
    if webhooks:
        cmd.append("--webhooks")

    # Our own temporary log unless the caller gave one; quoted if startup fails.
    own_log = tempfile.TemporaryFile() if log is None else None  # noqa: SIM115 - outlives this block
    try:
        proc = ReferenceServer(
            cmd,
            cwd=CONFORMANCE_DIR,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=own_log if own_log is not None else log,
        )
    except BaseException:
        if own_log is not None:
            own_log.close()
        raise

    def failure(reason: str) -> ConformanceError:
        proc.stop(timeout_s=5)
        detail = ""
        if own_log is not None:
            own_log.seek(0)
            detail = own_log.read()[-4000:].decode("utf-8", "replace")
            own_log.close()
        return ConformanceError(f"reference server {reason}\n{detail}".rstrip())

    assert proc.stdout is not None
    deadline = time.monotonic() + ready_timeout_s
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise failure(f"did not print READY within {ready_timeout_s} s")
            if not selector.select(timeout=remaining):
                continue
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                raise failure(f"exited before READY (status {proc.wait()})")
            buffer += chunk
    line = buffer.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    if not line.startswith(_READY_PREFIX):
        raise failure(f"printed {line!r} instead of READY")
    proc.url = line[len(_READY_PREFIX) :].strip()
    if own_log is not None:
        own_log.close()  # the child keeps writing to its own copy of the descriptor
    return proc


def _print_result(result: ConformanceResult) -> None:
    print(result.summary)
    print(
        f"passed={result.passed} failed={result.failed} skipped={result.skipped} "
        f"total={result.total} duration={result.duration_s:.1f}s exit={result.returncode}"
    )
    for error in result.file_errors:
        print(f"FILE ERROR {error}")
    for failure in result.failures:
        print(f"FAIL {failure.full_name}\n     {failure.error}")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: exit 0 when all tests pass, 1 on failures, 2 on harness errors."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("base_url", nargs="?", help="server origin, e.g. http://127.0.0.1:4437")
    parser.add_argument(
        "--subscriptions",
        action="store_true",
        help='also run the opt-in "Reserved subscription APIs" group',
    )
    parser.add_argument("--timeout", type=float, default=600, help="run time limit in seconds")
    parser.add_argument(
        "--reference",
        action="store_true",
        help="start the reference Node server (temporary data dir) and test it",
    )
    parser.add_argument(
        "--long-poll-timeout-ms",
        type=int,
        default=500,
        help="long-poll timeout for --reference (default 500)",
    )
    args = parser.parse_args(argv)
    if (args.base_url is None) == (not args.reference):
        parser.error("give either a base URL or --reference")

    try:
        if args.reference:
            with (
                tempfile.TemporaryDirectory(prefix="ds-reference-") as data_dir,
                start_reference_server(
                    data_dir,
                    0,
                    long_poll_timeout_ms=args.long_poll_timeout_ms,
                    webhooks=args.subscriptions,
                ) as server,
            ):
                print(f"reference server at {server.url}", file=sys.stderr)
                result = run_conformance(
                    server.url,
                    include_subscriptions=args.subscriptions,
                    timeout_s=args.timeout,
                )
        else:
            result = run_conformance(
                args.base_url,
                include_subscriptions=args.subscriptions,
                timeout_s=args.timeout,
            )
    except (ConformanceError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _print_result(result)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
