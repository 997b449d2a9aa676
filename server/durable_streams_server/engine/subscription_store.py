"""The subscriptions' durable copy: one JSON document, replaced atomically on every change.

Theory of operation
-------------------
Subscription state (configurations, links and acked positions, generations, wakes and
leases, webhook retry schedules) and the signing keys live in
``<data_dir>/subscriptions/state.json``. A change is applied in memory first (on the
event loop, synchronously, like the engine's own changes), then ``await save()`` makes
it durable: the document is serialized on the loop, written to a temporary file on a
worker thread, ``fsync``'d, renamed over the old one, and the directory is ``fsync``'d.
Saves are group-committed: while one write runs, every later change waits for the next
write, which carries all of them. ``save`` returns only when a write that started after
the caller's change has finished, so an answered request is durable across ``kill -9``.

This is a first step, not the storage seam: the file is local to ``data_dir`` (also
when Delta lives on S3), the whole document is rewritten per change (cost grows with the
number of subscriptions), and it is not in the WAL/Delta. The private signing key is in
it, so the file is created with mode 0600.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

FILE_NAME = "state.json"


class SubscriptionStore:
    def __init__(self, directory: Path, snapshot: Callable[[], dict[str, Any]]) -> None:
        self.directory = directory
        self.path = directory / FILE_NAME
        self._snapshot = snapshot
        self._changed = 0
        self._written = 0
        self._writing: asyncio.Task[None] | None = None

    def load(self) -> dict[str, Any] | None:
        """The last durable document, or ``None`` on a fresh data dir."""
        try:
            data: dict[str, Any] = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return data

    def write_now(self) -> None:
        """Synchronous write (used once at start-up, before serving)."""
        self._write(json.dumps(self._snapshot(), separators=(",", ":")).encode())

    async def save(self) -> None:
        """Make every change applied so far durable (group commit, see the module doc)."""
        self._changed += 1
        target = self._changed
        while self._written < target:
            if self._writing is None:
                self._writing = asyncio.get_running_loop().create_task(self._write_latest())
            task = self._writing
            await asyncio.shield(task)
            if self._writing is task:
                self._writing = None

    async def _write_latest(self) -> None:
        version = self._changed
        data = json.dumps(self._snapshot(), separators=(",", ":")).encode()
        await asyncio.to_thread(self._write, data)
        self._written = max(self._written, version)

    def _write(self, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
