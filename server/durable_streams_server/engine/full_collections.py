"""When the cyclic collector last scanned everything, for the idle sweep (``idle``).

A built stream left in memory costs nothing while the server is quiet, and a scan in every
full (generation 2) collection of Python's cyclic collector once it is busy: its ``Stream``
and its tail, ~1.7 µs a stream and collection (``collector.py``). Putting it to sleep and
building it again when it is next used cost a few such scans (~4 µs each way measured alone).
How often full collections run follows the load, not the clock: none on a quiet server, one
every fraction of a second under appends to random streams among 100,000 (each then took
26-40 ms with the 16,349 streams that creating them left built, and ~8 ms once streams idle
for 2 s slept). So a stream unused through the last ``FULL_SCANS`` full collections has cost
the loop about what sleeping costs, and ``IdleStreams`` lets it sleep then (never within a
second of its use), without waiting ``--idle-stream-s``: what the collector scans follows the
streams in use under load, and a quiet server keeps its streams built as long as before.

The times are taken from the collector's own callbacks (``gc.callbacks``: it calls each at
the start and the end of every collection, on whichever thread collects); this module only
notes them, and changes nothing in how or when the collector runs.
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Callable
from typing import Any

FULL_SCANS = 8
"""The full collections a stream stays built through unused before it may sleep: ~1.7 µs of
scans each, against sleeping and being built again (~4 µs each alone, more among other work)."""


class FullCollections:
    def __init__(self, clock: Callable[[], int], remembered: int = FULL_SCANS) -> None:
        self._clock = clock
        self._ended: deque[int] = deque(maxlen=remembered)
        """When each of the newest full collections ended (the clock's ms), oldest first."""

    def start(self) -> None:
        if self.collected not in gc.callbacks:
            gc.callbacks.append(self.collected)

    def close(self) -> None:
        if self.collected in gc.callbacks:
            gc.callbacks.remove(self.collected)

    def oldest(self) -> int | None:
        """When the oldest of the remembered full collections ended; ``None``: fewer than that
        have run since the start."""
        return self._ended[0] if len(self._ended) == self._ended.maxlen else None

    def collected(self, phase: str, info: dict[str, Any]) -> None:
        """The collector's callback (``gc.callbacks``): ``phase`` is ``start`` or ``stop``."""
        if phase == "stop" and info["generation"] == 2:
            self._ended.append(self._clock())
