"""Storage's sync policy: where and when the write-ahead log's batches become durable, and
when they count as durable.

**Where: on one dedicated thread, never on the event loop's.** A sync takes as long as the
disk decides: on cloud block storage a few in a hundred take a hundred milliseconds or more.
A sync on the loop's thread would hold every other request for that long (reads of other
streams, long-polls, SSE), however quick the disk usually is. On the sync thread only the
appends in that batch wait; the loop keeps serving everything else. There is no exception
for a lone record or a fast disk: whether a sync will be slow is not known before it ends.

**The hand-off: once per turn of the loop.** The loop collects the items submitted in one turn
of its own (the requests that turn served) in a list, and hands the list over at the turn's end
(``call_soon``, scheduled by the turn's first item) with one put on a ``queue.SimpleQueue``: an
append in C, plus a wake-up of the thread when it waits (no executor, no future per batch).
Handed over item by item, a thread that syncs quicker than the loop serves a request was woken
for most records on its own (under 32 clients' creates it slept and woke 0.75 times a create,
its voluntary context switches; handed over per turn, 0.41), each wake a switch of threads and
of the GIL and, once durable, a wake-up of the loop (``call_soon_threadsafe``). A turn's items
wait for its end, no longer: a lone request's record is handed over right after the callback
that submitted it (docs/decisions.md has the measurements).

**When: group commit, pipelined.** The thread takes everything handed over since its last
batch and passes it to ``write`` in one call (one write and one sync for all of it). While
it writes, the loop keeps handing over items; the thread takes them as soon as its write
returns, so the disk stays busy while the loop answers the batch just made durable.

**Counted durable after the write, from the loop.** Only once ``write`` has returned (every
byte of the batch written and synced: ``wal.WriteAheadLog.write``) does the thread hand the
loop ``on_durable`` with the highest LSN it covered (``loop.call_soon_threadsafe``), which
wakes the appenders waiting for it and the readers of what they wrote. An ``OSError`` from
``write`` is fatal: the loop gets ``on_failure`` and the thread ends (memory may be ahead
of the log; the next start recovers what the log holds).

**Cancelled, the task outlasts the batch in progress.** A cancelled ``run`` tells the thread
to take no further batch, then waits (through further cancellations) until the thread has
ended before it raises: the owner closes the log once the task has ended, and a batch still
being written then would write, cut segments and close descriptors under it (descriptor
numbers the process has meanwhile handed to other files).

What the items mean (frames, new segments) is the caller's (``wal_writer``); how a write is
made durable (``RWF_DSYNC``, or ``fdatasync`` where the flag is refused) is the log's (``wal``).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

THREAD_NAME = "wal-sync"
"""The name of the thread every write and sync of the log runs on."""


class _Stop:
    """Handed over to end the thread (after what was handed over before it)."""


_STOP = _Stop()


class SyncPolicy(Generic[T]):
    """Runs ``write`` on the sync thread with the items handed over since its last call.

    ``write`` returns the highest LSN the batch made durable (0: none); ``on_durable`` gets it
    on the loop afterwards, and ``on_failure`` gets an ``OSError`` ``write`` raised."""

    def __init__(
        self,
        write: Callable[[list[T]], int],
        on_durable: Callable[[int], None],
        on_failure: Callable[[OSError], None],
    ) -> None:
        self._write = write
        self._on_durable = on_durable
        self._on_failure = on_failure
        self._inbox: queue.SimpleQueue[list[T] | _Stop] = queue.SimpleQueue()
        self._turn: list[T] = []
        """The items handed over in this turn of the loop, not yet in the inbox."""
        self._loop: asyncio.AbstractEventLoop | None = None
        """The loop that hands items over, once ``run`` has started (before: each goes at once)."""
        self.abandoned = threading.Event()
        """Set once the task is cancelled (the loop is going away): the thread takes no
        further batch after the one it is writing."""
        self.thread: threading.Thread | None = None

    def hand_over(self, item: T) -> None:
        """Queue ``item`` for the sync thread (from the loop, in the order of the log): in the
        inbox at the end of this turn of the loop, or at once before ``run`` has started."""
        turn = self._turn
        turn.append(item)
        if len(turn) == 1:
            loop = self._loop
            if loop is None:
                self._end_turn()
            else:
                loop.call_soon(self._end_turn)

    def stop(self) -> None:
        """Let the thread end once everything handed over is written."""
        self._end_turn()
        self._inbox.put(_STOP)

    def _end_turn(self) -> None:
        turn = self._turn
        if turn:
            self._turn = []
            self._inbox.put(turn)

    async def run(self) -> None:
        """Start the sync thread and wait until it ends; cancelled, the thread ends after the
        batch it is writing, and so does this, before it raises (nothing may write to the log
        once its owner may close it)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._end_turn()  # (what was handed over before, if anything)
        ended: asyncio.Future[None] = loop.create_future()
        thread = threading.Thread(target=self._serve, args=(loop, ended), name=THREAD_NAME, daemon=True)
        self.thread = thread
        thread.start()
        try:
            await asyncio.shield(ended)
        except asyncio.CancelledError:
            self.abandoned.set()
            self._inbox.put(_STOP)
            while not ended.done():  # (the batch in progress: as long as the disk takes)
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(ended)
            raise

    def _serve(self, loop: asyncio.AbstractEventLoop, ended: asyncio.Future[None]) -> None:
        """The sync thread: batch after batch until stopped, abandoned or failed."""
        try:
            stopping = False
            abandoned = self.abandoned
            while not abandoned.is_set():
                batch, stopping = self._take(stopping)
                if abandoned.is_set() or not batch:
                    return  # (nothing left after a stop)
                try:
                    last = self._write(batch)
                except OSError as error:
                    _post(loop, self._on_failure, error)
                    return
                if last:
                    _post(loop, self._on_durable, last)
        finally:
            _post(loop, _resolve, ended)

    def _take(self, stopping: bool) -> tuple[list[T], bool]:
        """Everything handed over so far (waiting for a first item unless stopping), and
        whether a stop was among it."""
        inbox = self._inbox
        batch: list[T] = []
        try:
            item = inbox.get_nowait() if stopping else inbox.get()
            while True:
                if isinstance(item, _Stop):
                    stopping = True
                else:
                    batch += item
                item = inbox.get_nowait()
        except queue.Empty:
            pass
        return batch, stopping


def _post(loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: Any) -> None:
    """``callback(*args)`` on the loop's thread, unless the loop is gone (shut down meanwhile)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
