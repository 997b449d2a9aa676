"""LSNs and acknowledgement: who waits for which record to become durable.

Every record gets the next LSN when it is submitted. A request is acknowledged once its
record's LSN is durable. ``mark_durable(lsn)`` is called on the loop's thread, with the
highest LSN covered, by whichever tier makes records durable: for the WAL, the sync thread
hands it over once a batch's write and sync have returned (``sync_policy``); in delta mode,
the flusher after a commit. It wakes every waiter at or below that LSN in one pass over a
heap (waiters are woken in LSN order; no polling). Failing waiters is the other way out:
each gets its own exception, made by the caller (storage decides what the failure means).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable


class Acknowledgements:
    def __init__(self) -> None:
        self.next_lsn = 1
        """The LSN the next record will get."""
        self.durable_lsn = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._ids = itertools.count()
        self.on_durable: Callable[[int], None] | None = None
        """Called with the new durable LSN before any waiter is woken."""

    def recovered(self, last_lsn: int) -> None:
        """Everything up to ``last_lsn`` was durable before this start."""
        self.next_lsn = last_lsn + 1
        self.durable_lsn = last_lsn

    def stamp(self) -> int:
        """Hand out the next LSN."""
        lsn = self.next_lsn
        self.next_lsn += 1
        return lsn

    def is_durable(self, lsn: int) -> bool:
        return lsn <= self.durable_lsn

    async def wait(self, lsn: int) -> None:
        if lsn <= self.durable_lsn:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (lsn, next(self._ids), future))
        await future

    def mark_durable(self, lsn: int) -> None:
        if lsn <= self.durable_lsn:
            return
        self.durable_lsn = lsn
        if self.on_durable is not None:
            self.on_durable(lsn)
        while self._waiters and self._waiters[0][0] <= lsn:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(None)

    def fail_waiters(self, error: Callable[[], BaseException]) -> None:
        """Answer every waiter with a fresh ``error()``."""
        waiters, self._waiters = self._waiters, []
        for _, _, future in waiters:
            if not future.done():
                future.set_exception(error())
