"""The write-ahead log: segmented, append-only, fsync'd files under ``<data-dir>/wal``.

Blocking file operations only; they run on the sync thread (``sync_policy``), in batches
(group commit), never on the event loop's thread. A segment is named by the LSN of its
first record. After the Delta tier has committed everything up to some LSN, the segments
wholly below it are deleted; the segment being written is never deleted.

The log keeps a running count of its records' bytes (``size_bytes``) because the write
path consults it on every request (the WAL size cap): it is measured once when the log
is opened and then adjusted by every write, truncation and deletion, never by a ``stat``
per call. Writes and deletions run on different threads, hence the lock.

**Preallocation.** The segment being written is extended ``PREALLOCATE_BYTES`` at a time
(``posix_fallocate``) and written in place (``pwrite`` at its logical end), so a write's
sync does not also have to journal a new file size, which makes a small append's sync
measurably shorter (bench/README.md, "a preallocated WAL segment").
The preallocated part reads as zeros, which end the log like a torn tail (``decode_frames``),
so a crash leaves nothing to mistake for a record; closing a segment (rotation, shutdown)
truncates it to its frames. ``size_bytes`` counts frames only: it grows with every write
and shrinks only when segments are deleted, so the WAL cap refuses writes steadily (a count
of preallocated bytes would jump by a step at each rotation, letting writes in and out);
the disk holds at most one step more, which the owner keeps small beside its cap
(``preallocate_bytes``). On a file system without ``fallocate`` glibc writes the step's
blocks itself (slower, once a step); where even that fails (a full disk), the segment just
grows with each write.

**One call per batch; durable before it returns.** A batch is written with
``pwritev(..., RWF_DSYNC)``: the write and its data sync in one system call (``O_DSYNC`` for
that write: the same guarantee as ``fdatasync`` after it). The sync costs the same either
way, but the thread gives up and takes back the GIL once instead of twice, and each taking
back may wait for the loop's thread. Where the flag is refused (old kernels, some file
systems: ``EOPNOTSUPP``, ``EINVAL``, ``ENOSYS``), the log switches for good to ``pwrite`` +
``fdatasync``. Either way ``write`` returns only once every byte it was given is on disk: a
record is acknowledged after that (``sync_policy``), never before.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from .local_sync import fsync_path
from .records import Header, Record, decode_frames

_SUFFIX = ".wal"
PREALLOCATE_BYTES = 8 << 20
"""The current segment grows by this much at a time (see the module docstring)."""
_DSYNC_WRITE = getattr(os, "RWF_DSYNC", 0)
_UNSUPPORTED = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})


class WriteAheadLog:
    def __init__(self, directory: Path, preallocate_bytes: int = PREALLOCATE_BYTES) -> None:
        self.directory = directory
        self._step = preallocate_bytes
        self.directory.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = None
        self._segment_start: int | None = None
        self._end = 0
        """Where the current segment's next frame goes (its frames' bytes)."""
        self._allocated = 0
        """The current segment's file size: ``_end`` plus what is preallocated beyond it."""
        self._sizes = {start: path.stat().st_size for start, path in self._segments()}
        self._total = sum(self._sizes.values())
        self._sizes_lock = threading.Lock()
        self._dsync_write = bool(_DSYNC_WRITE)
        """Writes sync themselves (``RWF_DSYNC``) until the file system refuses the flag."""

    def _resize(self, start: int, size: int | None) -> None:
        """Record segment ``start``'s new size (``None``: it is gone)."""
        with self._sizes_lock:
            self._total += (size or 0) - self._sizes.pop(start, 0)
            if size is not None:
                self._sizes[start] = size

    def _segments(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.directory.iterdir():
            if path.suffix == _SUFFIX and path.stem.isdigit():
                found.append((int(path.stem), path))
        return sorted(found)

    def first_lsn(self) -> int | None:
        """The LSN the oldest segment starts at (``None``: no segment): every record from it on
        is in the log; those below were in Delta before their segments were deleted."""
        with self._sizes_lock:
            return min(self._sizes, default=None)

    def replay(self) -> Iterator[Record[Header]]:
        """Every intact record in LSN order; a torn tail is cut off the file it is in."""
        for start, path in self._segments():
            data = path.read_bytes()
            intact = 0
            for record, intact in decode_frames(data):  # noqa: B007 - read after the loop
                yield record
            if intact < len(data):
                with open(path, "r+b") as handle:
                    handle.truncate(intact)
                    os.fsync(handle.fileno())
                self._resize(start, intact)

    def start_segment(self, first_lsn: int) -> None:
        """Close the current segment (if any) and write from now on into a new one."""
        self.close()
        path = self.directory / f"{first_lsn:020d}{_SUFFIX}"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        self._segment_start = first_lsn
        self._end = self._allocated = os.fstat(self._fd).st_size  # reopened after a restart (replayed: frames only)
        self._resize(first_lsn, self._end)
        fsync_path(self.directory)

    def write(self, frames: list[bytes]) -> None:
        """Append frames and make them durable before returning."""
        assert self._fd is not None and self._segment_start is not None, "start_segment() first"
        data = b"".join(frames)
        if self._end + len(data) > self._allocated:
            self._preallocate(max(len(data), self._step))
        view = memoryview(data)
        synced = self._dsync_write
        try:
            while view:
                at = self._end + len(data) - len(view)
                if synced:
                    try:
                        written = os.pwritev(self._fd, [view], at, _DSYNC_WRITE)
                    except OSError as error:
                        if error.errno not in _UNSUPPORTED:
                            raise
                        synced = self._dsync_write = False
                        continue
                else:
                    written = os.pwrite(self._fd, view, at)
                view = view[written:]
        finally:  # a partial write is on disk too (replay cuts it off)
            self._end += len(data) - len(view)
            self._allocated = max(self._allocated, self._end)
            self._resize(self._segment_start, self._end)
        if not synced:
            os.fdatasync(self._fd)

    def _preallocate(self, size: int) -> None:
        """Extend the current segment by ``size`` zero bytes beyond its frames; where that
        fails (no room for it, no support), the next write grows the file itself."""
        assert self._fd is not None
        with contextlib.suppress(OSError):  # (a full disk fails the write itself: fatal there)
            os.posix_fallocate(self._fd, self._end, size)
        self._allocated = os.fstat(self._fd).st_size

    def drop_through(self, lsn: int) -> int:
        """Delete closed segments whose records all have LSN <= ``lsn``; return how many."""
        segments = self._segments()
        dropped = 0
        for (start, path), (next_start, _) in itertools.pairwise(segments):
            if start == self._segment_start or next_start - 1 > lsn:
                break
            path.unlink()
            self._resize(start, None)
            dropped += 1
        return dropped

    def discard_empty(self) -> None:
        """Delete every segment of a log that holds no record (one moving to another table: its
        leftover empty segment is named by the other table's LSNs), before it is started."""
        assert self._fd is None, "before start_segment()"
        for start, path in self._segments():
            path.unlink()
            self._resize(start, None)
        fsync_path(self.directory)

    def size_bytes(self) -> int:
        """Bytes of all segments' records (O(1): see the module docstring)."""
        return self._total

    def close(self) -> None:
        """Close the current segment, cut to its frames (if that fails, as on a failed disk,
        the next start's replay cuts the zeros off)."""
        if self._fd is not None:
            try:
                if self._allocated > self._end and self._segment_start is not None:
                    with contextlib.suppress(OSError):
                        os.ftruncate(self._fd, self._end)
                        self._allocated = self._end
            finally:
                os.close(self._fd)
                self._fd = None
