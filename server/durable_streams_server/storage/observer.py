"""What storage reports about itself, for metrics, without importing any metrics library.

Storage calls an observer at the end of each Delta commit and compaction pass; the HTTP
layer passes one that feeds Prometheus histograms. Gauges (WAL size, flush lag) are read
from ``Storage`` at scrape time instead, so the write path pays nothing for them.
"""

from __future__ import annotations

from typing import Protocol


class StorageObserver(Protocol):
    def delta_commit(self, seconds: float, ok: bool) -> None:
        """One Delta commit attempt of the flusher finished (``ok=False``: it raised)."""
        ...

    def compaction(self, seconds: float, ok: bool) -> None:
        """One compaction pass finished (``ok=False``: it raised)."""
        ...


class NullObserver:
    """The default: storage used without a metrics layer (tests, embedding)."""

    def delta_commit(self, seconds: float, ok: bool) -> None:
        pass

    def compaction(self, seconds: float, ok: bool) -> None:
        pass
