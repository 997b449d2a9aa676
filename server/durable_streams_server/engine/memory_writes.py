"""Write admission by memory: the bytes of appends in flight stay under the budget's write share.

Theory of operation
-------------------
``memory.MemoryBudget`` bounds what the server keeps by choice (caches, reads). A write's
bytes are not kept by choice: from the moment its body is read until its record is in Delta
they are in memory -- the body being received, the record queued for the flusher (and the
stream's in-memory tail, the same ``bytes``), then the commit's Arrow columns and Parquet
buffers, a few times the batch's size while it is written. Writers faster than Delta commits
(4 clients posting 1 MiB appends as fast as they go) made each batch larger than the
last, its commit slower, and the process's RSS 3 GiB on a 512 MiB budget.

``WriteAdmission`` counts those bytes: ``receiving`` (bodies admitted, until their request
ends) plus ``queued()`` (the flusher's records not yet in Delta: ``Storage.unflushed_bytes``,
the batch being committed included). A body is admitted before it is read (``admit``: its
``Content-Length``; a body of unknown length chunk by chunk, as it arrives) when it fits under
``limit``; otherwise it waits, first in first out, while its bytes stay in the client's socket
(nothing reads them: the connection's reading is paused by uvicorn's flow control, so the
client slows down rather than the server growing). Room comes back as requests end and as the
flusher commits (``poll_s``). A body still waiting after ``wait_s`` is refused with 503
``OVERLOADED`` and a ``Retry-After``: the client retries later, as after any 503 (at once while
storage makes no progress, ``stalled``: Delta commits failing, no room coming soon). One body is
always admitted when nothing else is in flight, so a body larger than the share still passes
(alone). A refused or waiting write has changed nothing.

So the bytes of writes in memory stay at about ``limit`` (plus one body over it), and each
Delta commit's batch is at most ``limit``: the commit's working memory is bounded with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import Callable

from ..protocol.errors import ServiceUnavailable

RETRY_AFTER_S = 1


class WriteAdmission:
    def __init__(
        self,
        limit: int,
        queued: Callable[[], int],
        *,
        stalled: Callable[[], bool] = lambda: False,
        wait_s: float = 10.0,
        poll_s: float = 0.02,
    ) -> None:
        self.limit = limit
        """Bytes of writes in flight (received + queued for Delta); 0: no limit."""
        self.queued = queued
        self.stalled = stalled
        """Whether storage makes no progress now (Delta commits failing): no room is coming soon,
        so a body that does not fit is refused at once instead of waiting."""
        self.wait_s = wait_s
        self.poll_s = poll_s
        self.receiving = 0
        """Bytes of admitted bodies whose request has not ended."""
        self.waited = 0
        """Bodies that waited for room (counted once each)."""
        self.refused = 0
        """Bodies refused after ``wait_s`` without room."""
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._poll: asyncio.TimerHandle | None = None

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _fits(self, nbytes: int) -> bool:
        in_flight = self.receiving + self.queued()
        return in_flight + nbytes <= self.limit or not in_flight

    def try_admit(self, nbytes: int) -> bool:
        """Admit ``nbytes`` now if they fit and nobody waits before them."""
        if not self.limit or (not self._waiters and self._fits(nbytes)):
            self.receiving += nbytes
            return True
        return False

    async def admit(self, nbytes: int) -> None:
        """Admit ``nbytes`` of a body (``release`` them when its request ends): at once if they
        fit, else after waiting for room; ``ServiceUnavailable`` (503, ``OVERLOADED``) if none
        comes within ``wait_s``."""
        if self.try_admit(nbytes):
            return
        if self.stalled():
            self.refused += 1
            raise self.overloaded()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        entry = (nbytes, waiter)
        self._waiters.append(entry)
        self.waited += 1
        self._schedule(loop)
        timer = loop.call_later(self.wait_s, _expire, waiter)
        try:
            await waiter
        except BaseException:
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)
            if waiter.done() and not waiter.cancelled():
                error = waiter.exception()
                if error is None:  # (admitted, then cancelled before it went on)
                    self.release(nbytes)
                elif isinstance(error, TimeoutError):
                    self.refused += 1
                    raise self.overloaded() from None
            raise
        finally:
            timer.cancel()

    def overloaded(self) -> ServiceUnavailable:
        limit = self.limit / 1024 / 1024
        return ServiceUnavailable(
            f"writes in flight are over this server's {limit:,.0f} MiB share of its memory budget; retry shortly",
            code="OVERLOADED",
            retry_after_s=RETRY_AFTER_S,
        )

    def release(self, nbytes: int) -> None:
        """A request whose body was admitted has ended."""
        self.receiving -= nbytes
        self._grant()

    def _grant(self) -> None:
        """Admit the waiters that fit now, in order."""
        waiters = self._waiters
        while waiters:
            nbytes, waiter = waiters[0]
            if waiter.done():  # (expired or cancelled: leaves at its own wake-up)
                waiters.popleft()
                continue
            if not self._fits(nbytes):
                return
            waiters.popleft()
            self.receiving += nbytes
            waiter.set_result(None)

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        """While bodies wait, look again every ``poll_s``: the flusher's commits make room too."""
        if self._poll is None:
            self._poll = loop.call_later(self.poll_s, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._poll = None
        self._grant()
        if self._waiters:
            self._schedule(loop)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


def write_share(memory_budget: int) -> int:
    """The bytes of writes in flight a memory budget admits (``WriteAdmission.limit``); 0: no limit."""
    return math.ceil(memory_budget / 4) if memory_budget else 0
