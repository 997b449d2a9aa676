"""One memory budget for what the server keeps or holds by choice: tail caches, the
history cache and in-flight reads.

Theory of operation
-------------------
Everything the server could do without is *held* here under a key, with its size and a
way to let it go: the flushed part of each stream's in-memory tail (``("tail", uid)``;
letting go trims it, and later reads of those messages go to Delta), and each history
cache entry (``("history", uid, seq)``). Held entries form one least-recently-used order;
using an entry (a read or a write of the stream) moves it to the back.

*In-flight* reads reserve what they may gather (``reading``) before they ask storage or
copy from a tail, and give it back when done. Whenever held + in-flight bytes exceed the
budget, held entries are let go from the front of the order (the tails of the streams idle
longest first) until they fit. A read that would take the in-flight total past the budget
waits until earlier reads finish; one read always proceeds, so reads never deadlock, and
a reservation larger than the budget is cut to it.

Not held here, and so on top of the budget: writes in flight -- bodies being received and
records not yet in Delta (unflushed messages stay in memory until their commit) -- which
``memory_writes.WriteAdmission`` bounds with a share of the same ``--memory-budget``;
per-stream bookkeeping, the bytes of responses already
handed to the HTTP layer, and the history reader's parked cursors, which storage bounds
with its own share of the budget (``history_parked_bytes``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable

Release = Callable[[Hashable], None]
"""Lets an entry go: called with its key (one function for a kind of entry, not one each)."""


class MemoryBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        """Bytes; 0: no limit (nothing is let go, no read waits)."""
        self.held = 0
        self.in_flight = 0
        self.evictions = 0
        self._sizes: OrderedDict[Hashable, int] = OrderedDict()
        """Held entries' bytes, least recently used first."""
        self._releases: dict[Hashable, Release] = {}
        self._released: asyncio.Event | None = None

    @property
    def used(self) -> int:
        return self.held + self.in_flight

    def hold(self, key: Hashable, nbytes: int, release: Release, *, first: bool = False) -> None:
        """Keep (or resize) the entry ``key`` of ``nbytes`` as the most recently used (``first``:
        as the least, the next to go); ``release(key)`` is called if the budget lets it go."""
        self.drop(key)
        if nbytes <= 0:
            return
        self._sizes[key] = nbytes
        if first:
            self._sizes.move_to_end(key, last=False)
        self._releases[key] = release
        self.held += nbytes
        self._shrink()

    def resize(self, limit: int) -> None:
        """A new limit (``memory_guard`` moves it); held entries beyond it are let go."""
        self.limit = limit
        self._shrink()

    def touch(self, key: Hashable) -> None:
        if key in self._sizes:
            self._sizes.move_to_end(key)

    def drop(self, key: Hashable) -> None:
        """Forget an entry without calling its release (its owner let it go)."""
        nbytes = self._sizes.pop(key, None)
        if nbytes is not None:
            self.held -= nbytes
            del self._releases[key]

    @contextlib.asynccontextmanager
    async def reading(self, nbytes: int) -> AsyncIterator[None]:
        """Reserve ``nbytes`` for a read while it runs (see the module docstring)."""
        while (reserved := self.reserve_now(nbytes)) is None:
            if self._released is None:
                self._released = asyncio.Event()
            await self._released.wait()
        try:
            yield
        finally:
            self.release(reserved)

    def reserve_now(self, nbytes: int) -> int | None:
        """``reading``'s reservation if it is granted without waiting: the bytes reserved
        (at most the budget), to ``release`` when the read is done; ``None``: it must wait."""
        if self.limit:
            nbytes = min(nbytes, self.limit)
            if self.in_flight and self.in_flight + nbytes > self.limit:
                return None
        self.in_flight += nbytes
        self._shrink()
        return nbytes

    def release(self, nbytes: int) -> None:
        self.in_flight -= nbytes
        released, self._released = self._released, None
        if released is not None:
            released.set()

    def _shrink(self) -> None:
        while self.limit and self.used > self.limit and self._sizes:
            key, nbytes = self._sizes.popitem(last=False)
            self.held -= nbytes
            self.evictions += 1
            self._releases.pop(key)(key)
