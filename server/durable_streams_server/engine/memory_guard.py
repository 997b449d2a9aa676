"""Keeping the process's resident memory within ``--memory-budget`` of its size at start.

Theory of operation
-------------------
The memory budget (``memory.MemoryBudget``) counts what the server keeps by choice: tail
caches, the history cache, reads in flight. The process needs more than that while it
works: row groups being decoded, the Delta writer's buffers, responses being sent, and the
pages allocators keep after a free. Measured with 16 clients writing and reading 500
streams, that came to 200-300 MiB on top of a 512 MiB budget, at 1 GiB stored as at 2 GiB
(bench/README.md), so a budget counted only by choice let RSS reach 1.8x of it.

The guard closes that loop. Every ``interval_s`` it reads the process's RSS and computes
what is outside the budget's accounting: ``RSS - baseline - held - in flight``, where the
baseline is the lowest ``RSS - held - in flight`` seen since the guard started (after
recovery: the code, the libraries, the streams' bookkeeping). The caches may then hold
``budget - outside``, using the largest ``outside`` of the last ``window`` samples
(working memory comes in bursts), never less than ``floor`` and never more than the limit
the budget was configured with. When that
shrinks the budget, its entries are let go least recently used first, as for any eviction
(results never change: what is let go is read from Delta), and the freed pages are handed
back to the system (glibc's ``malloc_trim`` and Arrow's pool), since a free alone may leave
them resident. They are handed back too whenever the RSS has grown by ``budget // 16`` since
the last time: work that came and went (a burst of 1 MiB appends, whose bodies glibc keeps in
its heap once freed) leaves no resident pages behind it. When the work outside shrinks, the
allowance grows back.

So ``RSS <= baseline + budget`` holds whenever the work outside the budget fits in
``budget - floor``; beyond that the caches are at their floor and RSS is the floor plus
what the work needs: the guard can only let go of what is kept by choice.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import logging
import os
from collections import deque
from collections.abc import Callable

import pyarrow as pa

from .memory import MemoryBudget
from .periodic import Periodic

log = logging.getLogger("durable_streams_server.memory")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def process_rss() -> int:
    """Resident bytes of this process (``/proc/self/statm``); 0 where there is none."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except OSError:
        return 0


@functools.cache
def glibc() -> ctypes.CDLL | None:
    """glibc, once (``find_library`` runs ``ldconfig``); ``None`` elsewhere (e.g. musl)."""
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name and "libc.so" in name else None


def release_freed() -> None:
    """Hand freed pages back to the system: Arrow's pool, then glibc's heap."""
    pa.default_memory_pool().release_unused()
    libc = glibc()
    if libc is not None:
        libc.malloc_trim(0)


class MemoryGuard:
    def __init__(
        self,
        memory: MemoryBudget,
        budget: int,
        *,
        floor: int | None = None,
        interval_s: float = 0.5,
        window: int = 10,
        rss: Callable[[], int] = process_rss,
        release: Callable[[], None] = release_freed,
    ) -> None:
        self.memory = memory
        self.budget = budget
        """Bytes of RSS above the baseline, everything included."""
        self.configured = memory.limit
        self.floor = max(1, min(self.configured, floor if floor is not None else budget // 8))
        self.interval_s = interval_s
        self.baseline: int | None = None
        self.outside = 0
        """Bytes outside the budget's accounting at the last sample."""
        self._rss = rss
        self._release = release
        self._recent: deque[int] = deque(maxlen=window)
        self.rss = 0
        """The RSS at the last sample."""
        self._low_rss = 0
        """The lowest RSS since freed pages were last handed back (their RSS then)."""
        self._periodic = Periodic("memory-guard", interval_s, self._step, log)

    def sample(self) -> bool:
        """One step (see the module docstring); whether it let entries go."""
        rss = self.rss = self._rss()
        if not rss:
            return False
        self._low_rss = min(self._low_rss, rss) if self._low_rss else rss
        if self.baseline is None or rss - self.memory.used < self.baseline:
            # The lowest size seen outside the budget: start-up's transient allocations
            # may be handed back after the first sample.
            self.baseline = rss - self.memory.used
        self.outside = rss - self.baseline - self.memory.used
        self._recent.append(self.outside)
        allowance = max(self.floor, min(self.configured, self.budget - max(self._recent)))
        evictions = self.memory.evictions
        self.memory.resize(allowance)
        return self.memory.evictions > evictions

    def start(self) -> None:
        if self.budget and self.configured and self._rss():
            self._periodic.start()

    async def close(self) -> None:
        await self._periodic.close()

    def grown(self) -> bool:
        """Whether the RSS has grown by ``budget // 16`` since freed pages were last handed back."""
        return self.rss > self._low_rss + self.budget // 16

    async def _step(self) -> None:
        if self.sample() or self.grown():
            await asyncio.to_thread(self._release)
            self._low_rss = self._rss()
