"""Helpers shared by the client tests (imported as a plain module: tests/client is on sys.path)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def later(delay_s: float, action: Callable[[], object]) -> threading.Thread:
    """Run ``action`` on a thread after ``delay_s`` (e.g. an append while a reader waits)."""

    def run() -> None:
        time.sleep(delay_s)  # (the caller's schedule: the reference server shows no waiting reader to wait for)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def cli(
    *args: str, url: str | None = None, stdin: bytes | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m pyspark_durable_streams.client.cli`` as a real subprocess."""
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost"}
    env.pop("DURABLE_STREAMS_URL", None)
    if url is not None:
        env["DURABLE_STREAMS_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "pyspark_durable_streams.client.cli", *args],
        input=stdin,
        capture_output=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=timeout,
        check=False,
    )
