"""What a WAL directory holds on disk, read the way a replay reads it; the system calls the WAL
makes, recorded with the thread that made them and the acknowledgements between them."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typing_extensions import Buffer

from durable_streams_server.storage.acks import Acknowledgements
from durable_streams_server.storage.records import decode_frames

DSYNC = os.RWF_DSYNC


def records_on_disk(directory: Path) -> int:
    """Bytes of the segments' records (a segment being written has preallocated zeros after them)."""
    total = 0
    for path in directory.glob("*.wal"):
        end = 0
        for _, end in decode_frames(path.read_bytes()):  # noqa: B007 - read after the loop
            pass
        total += end
    return total


# -- the WAL's system calls, recorded -------------------------------------------------------


@dataclass(frozen=True)
class DiskCall:
    """One write or sync the WAL made on a file under the recorded directory (after it returned)."""

    name: str
    """``pwritev``, ``pwrite``, ``fdatasync``, ``fsync``, ``posix_fallocate`` or ``ftruncate``."""
    path: str
    thread: int
    thread_name: str
    offset: int = 0
    length: int = 0
    """Bytes written (``pwritev`` and ``pwrite``)."""
    flags: int = 0
    """``pwritev``'s flags."""


@dataclass(frozen=True)
class Ack:
    """``Acknowledgements.mark_durable(lsn)`` ran: every record up to ``lsn`` counts as durable."""

    lsn: int
    thread: int


@dataclass
class DiskCalls:
    """Wraps the ``os`` functions the WAL writes and syncs with (``monkeypatch``), recording each
    call on a file under ``directory`` in ``events``, in the order they returned.

    ``refuse_dsync``: a ``pwritev`` with ``RWF_DSYNC`` fails with ``EOPNOTSUPP``, as on a file
    system without the flag (the WAL must fall back to ``fdatasync``). ``before_write``: called
    on the writing thread before every write reaches the disk (e.g. to let the loop run what it
    was handed first, as a slow disk would)."""

    directory: Path
    refuse_dsync: bool = False
    before_write: Callable[[], None] | None = None
    events: list[DiskCall | Ack] = field(default_factory=list)
    refused: int = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> DiskCalls:
        real_pwritev, real_pwrite = os.pwritev, os.pwrite

        def pwritev(fd: int, buffers: Sequence[Buffer], offset: int, flags: int = 0) -> int:
            path = self._path(fd)
            if path is not None and self.before_write is not None:
                self.before_write()
            if path is not None and self.refuse_dsync and flags & DSYNC:
                self.refused += 1
                raise OSError(errno.EOPNOTSUPP, "RWF_DSYNC refused (test)")
            written = real_pwritev(fd, buffers, offset, flags)
            if path is not None:
                self._note("pwritev", path, offset=offset, length=written, flags=flags)
            return written

        def pwrite(fd: int, data: Buffer, offset: int) -> int:
            path = self._path(fd)
            if path is not None and self.before_write is not None:
                self.before_write()
            written = real_pwrite(fd, data, offset)
            if path is not None:
                self._note("pwrite", path, offset=offset, length=written)
            return written

        monkeypatch.setattr(os, "pwritev", pwritev)
        monkeypatch.setattr(os, "pwrite", pwrite)
        for name in ("fdatasync", "fsync", "posix_fallocate", "ftruncate"):
            monkeypatch.setattr(os, name, self._plain(name, getattr(os, name)))
        return self

    def _plain(self, name: str, real: Callable[..., None]) -> Callable[..., None]:
        def call(fd: int, *args: int) -> None:
            real(fd, *args)
            path = self._path(fd)
            if path is not None:
                self._note(name, path)

        return call

    def _path(self, fd: int) -> str | None:
        """The file ``fd`` is open on, if it is under ``directory``."""
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        root = str(self.directory)
        return path if path == root or path.startswith(root + os.sep) else None

    def _note(self, name: str, path: str, **details: int) -> None:
        thread = threading.current_thread()
        assert thread.ident is not None
        self.events.append(DiskCall(name, path, thread.ident, thread.name, **details))

    def ack(self, lsn: int) -> None:
        self.events.append(Ack(lsn, threading.get_ident()))

    @property
    def calls(self) -> list[DiskCall]:
        return [event for event in self.events if isinstance(event, DiskCall)]


class RecordingAcks(Acknowledgements):
    """The real acknowledgements, noting each ``mark_durable`` in ``calls.events``."""

    def __init__(self, calls: DiskCalls) -> None:
        super().__init__()
        self._calls = calls

    def mark_durable(self, lsn: int) -> None:
        if lsn > self.durable_lsn:
            self._calls.ack(lsn)
        super().mark_durable(lsn)


def unsafe_acks(events: list[DiskCall | Ack], directory: Path) -> list[str]:
    """Every record counted durable before all its bytes were on disk: written with
    ``RWF_DSYNC``, or written and then ``fdatasync``'d (or ``fsync``'d), before the ``Ack``
    that covers its LSN. Where each record lies is read from the segments afterwards."""
    placed: list[tuple[int, str, int, int]] = []  # (lsn, path, start, end)
    for path in sorted(directory.glob("*.wal")):
        start = 0
        for record, end in decode_frames(path.read_bytes()):
            placed.append((record.lsn, str(path), start, end))
            start = end
    synced: dict[str, list[tuple[int, int]]] = {}
    pending: dict[str, list[tuple[int, int]]] = {}
    problems = []
    for event in events:
        if isinstance(event, DiskCall) and event.name in ("pwritev", "pwrite"):
            span = (event.offset, event.offset + event.length)
            (synced if event.flags & DSYNC else pending).setdefault(event.path, []).append(span)
        elif isinstance(event, DiskCall) and event.name in ("fdatasync", "fsync"):
            synced.setdefault(event.path, []).extend(pending.pop(event.path, []))
        elif isinstance(event, Ack):
            for lsn, path, start, end in placed:
                if lsn <= event.lsn and not _covered(synced.get(path, []), start, end):
                    problems.append(f"LSN {lsn} at {path}[{start}:{end}] counted durable by Ack({event.lsn}) unsynced")
    return problems


def _covered(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether the spans together cover ``[start, end)``."""
    at = start
    for low, high in sorted(spans):
        if low > at:
            break
        at = max(at, high)
        if at >= end:
            return True
    return at >= end
