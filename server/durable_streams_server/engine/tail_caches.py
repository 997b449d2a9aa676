"""Each stream's cached tail in the memory budget: its flushed messages kept in memory for reads.

After a flush, a stream's messages now in Delta stay in its ``MemoryTail`` up to
``keep_bytes`` (the newest), and those bytes are *held* in the memory budget (``memory``)
under ``("tail", uid)``. Reads and writes of the stream touch the entry; when the budget
lets it go, the stream forgets its flushed messages and reads of them go to Delta,
identical. Unflushed messages are never let go: they are not in Delta yet.

The entry refers to the stream by uid, not by a closure over it: letting it go finds the
stream built in the index (a stream asleep or removed has nothing cached), so the entry is
nothing for the cyclic collector to scan (``collector.py``) and never keeps a stream from
going to sleep (``stream_index``: only a stream nothing refers to sleeps).
"""

from __future__ import annotations

from collections.abc import Hashable

from .memory import MemoryBudget
from .stream import Stream
from .stream_index import StreamIndex


class TailCaches:
    def __init__(self, memory: MemoryBudget, index: StreamIndex, keep_bytes: int) -> None:
        self.memory = memory
        self.index = index
        self.keep_bytes = keep_bytes
        """Flushed bytes kept per stream, at most (the budget may keep fewer)."""
        self._release = self._let_go  # (bound once: one function for every tail's entry)

    def flushed(self, stream: Stream, tail: int) -> None:
        """``stream``'s messages below ``tail`` are in Delta: keep the newest ``keep_bytes`` of
        them, held in the budget."""
        stream.mark_flushed(tail)
        stream.trim_flushed(self.keep_bytes)
        self.memory.hold(("tail", stream.uid), stream.flushed_mem_bytes, self._release)

    def touch(self, uid: int) -> None:
        """``uid``'s cache was used: the last the budget lets go."""
        self.memory.touch(("tail", uid))

    def let_go(self, stream: Stream) -> None:
        """Forget ``stream``'s flushed messages now (it goes to sleep)."""
        stream.trim_flushed(0)
        self.memory.drop(("tail", stream.uid))

    def drop(self, uid: int) -> None:
        """Forget ``uid``'s entry (the stream is removed)."""
        self.memory.drop(("tail", uid))

    def _let_go(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        stream = self.index.built(key[1])
        if stream is not None:
            stream.trim_flushed(0)
