"""The WAL writer: group commit of submitted records into the write-ahead log.

``queue`` takes each record's encoded frame synchronously (from ``Storage.submit``, in
LSN order). One writer task drains everything queued so far, writes it with one
``write`` and one ``fdatasync`` on a worker thread, and that thread, right after the sync,
hands the loop the call that marks it durable (waking its waiters: the appenders, and
through ``Engine.on_durable`` the long-poll and SSE readers) -- the writer task itself
resumes a turn later. While one batch syncs, the next one accumulates, and the worker
thread takes it as soon as its sync returns (``_drain``): the disk stays busy while the
loop answers the batch just made durable, instead of idling until the writer task's turn
comes after all those answers (32 clients creating streams: the gap between two syncs was
~1.2 ms of a ~2 ms cycle). Frames are queued on a ``deque`` (appends and pops are atomic
between the two threads); the worker stops taking them once a rotation is asked for, under
a lock the request shares, so that no frame at or past a cut lands in the segment before
it (that segment is deleted once Delta holds everything below the cut).

A batch of one record on a fast disk is written and synced on the loop's own thread
instead: that is a client appending alone (or a first append after a quiet spell), whose
answer waits for the sync either way, and the two thread hand-offs cost it about as much
as the sync (sequential appends: ~1,200/s -> ~1,500/s here; see bench/README.md). The
loop is blocked meanwhile, so this is only done while syncs are quick: while the typical
recent sync (``sync_s``) is at most ``INLINE_SYNC_S``; on a slow disk every sync goes to the
thread, and requests keep being served while it waits. Concurrent appends make batches of
several records, which always sync on the thread. ``sync_s`` is the median of the last
``RECENT_SYNCS`` syncs, not an average: the disk's speed, which one slow sync does not
change. (With a moving average, one 2 ms sync among this disk's ~0.4 ms ones pushed it past
the limit for the next five, and as syncs were slower for a minute, it crossed the limit
back and forth: each lone sync sent to the thread made a one-reader long-poll wake ~180 µs
slower, 1.11-1.19 against 1.26-1.40 ms here, alternating runs.)

**After a quiet spell** (no sync for ``QUIET_S``) a lone record is synced sooner still: by
its own request, when it waits for durability (``sync_lone``, from ``Storage.wait_durable``),
instead of by the writer task a turn of the loop later. Alone that gains little (~15 µs of a
~1.3 ms long-poll wake after an idle moment here), but such a request then never waits, and a
lean request that never waits needs no task (``http/eager.py``: ~60 µs more; bench/README.md,
issue 18, twelfth session). The engine submits
and applies every record without an ``await`` in between, so when a request waits, what it
wrote is applied in memory and the readers this sync wakes see it. Only one record syncs this
way per quiet spell: in a burst the requests after it find a sync that just ended, and queue
for the writer task as always, which batches them. So it may block the loop for longer than
a sync of the writer task's may: while syncs take up to ``LONE_SYNC_S`` (a disk syncing in
0.5-1 ms, as many network-attached SSDs do, still gives its lone writers and their readers
the shorter path; it blocks the loop for one sync per quiet spell at most).

The flusher asks for a rotation at its cut (``rotate_at``): the frames below the cut go
into the current segment, the rest into a new segment named by the cut, so the segments
below it can be deleted once the Delta commit covering them has succeeded. A write or
fsync error is fatal (``on_failure``): memory may be ahead of the log, and the writer
stops; the next start recovers what the log holds.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from functools import partial

from .acks import Acknowledgements
from .wal import WriteAheadLog

INLINE_SYNC_S = 0.0005
"""The writer task syncs a lone record on the loop's thread while syncs typically take at most this."""
LONE_SYNC_S = 0.001
"""A lone record after a quiet spell is synced by its request while syncs typically take at most this."""
QUIET_S = 0.001
"""A lone record is synced by its own request when no sync ended for this long."""
RECENT_SYNCS = 15
"""``sync_s`` is the median duration of this many recent syncs."""


class WalWriter:
    def __init__(self, wal: WriteAheadLog, acks: Acknowledgements, on_failure: Callable[[OSError], None]) -> None:
        self.wal = wal
        self._acks = acks
        self._on_failure = on_failure
        self._buffer: deque[tuple[int, bytes]] = deque()
        self._last_queued_lsn = 0
        self._rotate_at: int | None = None
        self._rotation = threading.Lock()
        """Held while the worker takes frames, and while a rotation is asked for."""
        self._wakeup = asyncio.Event()
        self._closing = False
        self._abandoned = False
        """The writer task was cancelled while the worker synced: it takes no more batches."""
        self.sync_s = 0.0
        """The median duration of a batch's write and sync, over the last ``RECENT_SYNCS``."""
        self._recent_syncs: deque[float] = deque(maxlen=RECENT_SYNCS)
        self._synced_at = 0.0
        """When the last batch's sync ended (``time.perf_counter``)."""
        self._on_thread = False
        """The worker thread is writing (it takes queued frames itself: ``_drain``)."""
        self._stopped = False
        """A write failed: nothing more is written."""

    def recovered(self, last_lsn: int) -> None:
        """Continue after ``last_lsn``, in a new segment."""
        self._last_queued_lsn = last_lsn
        self.wal.start_segment(last_lsn + 1)

    def queue(self, lsn: int, frame: bytes) -> None:
        self._buffer.append((lsn, frame))
        self._wakeup.set()

    def sync_lone(self, lsn: int) -> None:
        """On the loop's thread: write and sync the record ``lsn`` now and mark it durable, when
        it is the only one queued, the writer is idle, and it comes after a quiet spell (see the
        module docstring); otherwise leave it to the writer task. A failure is fatal, as there."""
        buffer = self._buffer
        if (
            len(buffer) != 1
            or buffer[0][0] != lsn
            or self._on_thread
            or self._rotate_at is not None
            or self._closing
            or self._abandoned
            or self._stopped
            or self.sync_s > LONE_SYNC_S
            or time.perf_counter() - self._synced_at < QUIET_S
        ):
            return
        _, frame = buffer.popleft()
        self._last_queued_lsn = lsn
        try:
            self._synced(_write_and_rotate(self.wal, [frame], None, [], None))
        except OSError as error:
            self._stopped = True
            self._on_failure(error)
            return
        self._acks.mark_durable(lsn)

    def _synced(self, took: float) -> None:
        """A batch's write and sync took ``took`` seconds, and just ended (on the worker thread
        or the loop's: a ``deque`` append, and a copy of it, are atomic)."""
        recent = self._recent_syncs
        recent.append(took)
        self.sync_s = sorted(recent)[len(recent) // 2]
        self._synced_at = time.perf_counter()

    def rotate_at(self, first_lsn: int) -> None:
        """Start a new segment at ``first_lsn`` once everything before it is written."""
        with self._rotation:
            self._rotate_at = first_lsn
        self._wakeup.set()

    def _take(self) -> list[tuple[int, bytes]]:
        """Everything queued so far, in LSN order."""
        buffer = self._buffer
        return [buffer.popleft() for _ in range(len(buffer))]

    def close(self) -> None:
        """Let ``run`` return once everything queued is written."""
        self._closing = True
        self._wakeup.set()

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if self._stopped:
                return
            while True:
                batch = self._take()
                if batch:
                    self._last_queued_lsn = batch[-1][0]
                rotate_at = self._rotate_at
                rotate = rotate_at is not None and self._last_queued_lsn >= rotate_at - 1
                if not batch and not rotate:
                    break
                before = [frame for lsn, frame in batch if not rotate or lsn < (rotate_at or 0)]
                after = [frame for lsn, frame in batch if rotate and lsn >= (rotate_at or 0)]
                if rotate:
                    self._rotate_at = None
                last = batch[-1][0] if batch else 0
                try:
                    if len(batch) == 1 and not rotate and self.sync_s <= INLINE_SYNC_S:
                        took = _write_and_rotate(self.wal, before, None, after, None)
                    else:
                        mark = self._acks.mark_durable
                        durable = partial(self._loop.call_soon_threadsafe, mark, last) if batch else None
                        self._on_thread = True
                        try:
                            took, last = await asyncio.to_thread(
                                self._sync_on_thread, before, rotate_at if rotate else None, after, durable, last
                            )
                        except asyncio.CancelledError:
                            self._abandoned = True  # (the worker ends after the batch it is syncing)
                            raise
                        finally:
                            self._on_thread = False
                except OSError as error:
                    self._stopped = True
                    self._on_failure(error)
                    return
                if batch and not rotate:  # (a rotation also creates a file and syncs the directory)
                    self._synced(took)
                if last:
                    self._acks.mark_durable(last)  # (done already, unless the loop is closing)
            if self._closing and not self._buffer:
                return

    def _sync_on_thread(
        self,
        before: list[bytes],
        rotate_at: int | None,
        after: list[bytes],
        durable: Callable[[], object] | None,
        last: int,
    ) -> tuple[float, int]:
        """``_write_and_rotate`` on the worker thread, then ``_drain``: the first batch's
        seconds, and the last LSN synced (``last``: the first batch's)."""
        took = _write_and_rotate(self.wal, before, rotate_at, after, durable)
        return took, self._drain(last)

    def _drain(self, last: int) -> int:
        """On the worker thread: write and sync what was queued meanwhile, batch after batch,
        each marked durable from here as the first one is, until nothing waits or a rotation is
        asked for (the writer task does that one); the last LSN synced."""
        mark = self._acks.mark_durable
        call = self._loop.call_soon_threadsafe
        while True:
            with self._rotation:
                if self._rotate_at is not None or self._abandoned:
                    return last
                batch = self._take()
            if not batch:
                return last
            last = batch[-1][0]
            self._last_queued_lsn = last
            frames = [frame for _, frame in batch]
            self._synced(_write_and_rotate(self.wal, frames, None, [], partial(call, mark, last)))


def _write_and_rotate(
    wal: WriteAheadLog,
    before: list[bytes],
    rotate_at: int | None,
    after: list[bytes],
    durable: Callable[[], object] | None,
) -> float:
    """Write (and sync) the frames, then call ``durable``; returns the seconds the I/O took."""
    started = time.perf_counter()
    if before:
        wal.write(before)
    if rotate_at is not None:
        wal.start_segment(rotate_at)
    if after:
        wal.write(after)
    took = time.perf_counter() - started
    if durable is not None:
        durable()  # everything is synced: wake the waiters from here, one turn of the loop sooner
    return took
