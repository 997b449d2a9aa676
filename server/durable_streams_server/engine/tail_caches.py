"""Each stream's cached tail in the memory budget: its flushed messages kept in memory for reads.

After a flush, a stream's messages now in Delta stay in its ``MemoryTail`` up to
``keep_bytes`` (the newest), and those bytes are *held* in the memory budget (``memory``)
under ``("tail", uid)``. Reads and writes of the stream touch the entry; when the budget
lets it go, the stream forgets its flushed messages and reads of them go to Delta,
identical. Unflushed messages are never let go: they are not in Delta yet.

The entry refers to the stream by uid, not by a closure over it: letting it go finds the
stream built in the index, so the entry is nothing for the cyclic collector to scan
(``collector.py``) and never keeps a stream from going to sleep (``stream_index``: only a
stream nothing refers to sleeps). A stream going to sleep leaves its cached tail in
``asleep`` (``asleep_tails``: one entry for all of them), and gets it back when it is built
again.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable
from itertools import chain

from .asleep_tails import AsleepTails, Kept, kept_end, kept_of, kept_stamps
from .memory import MemoryBudget
from .stream import Stream
from .stream_index import StreamIndex

ASLEEP_SHARE = 8
"""The sleeping streams' cached tails take at most this fraction of the memory budget."""
MOST_ASLEEP_BYTES = 64 * 1024 * 1024
"""... and at most this many bytes, whatever the budget (and without one)."""


class TailCaches:
    def __init__(self, memory: MemoryBudget, index: StreamIndex, keep_bytes: int) -> None:
        self.memory = memory
        self.index = index
        self.keep_bytes = keep_bytes
        """Flushed bytes kept per stream, at most (the budget may keep fewer)."""
        self._release = self._let_go  # (bound once: one function for every tail's entry)
        share = memory.limit // ASLEEP_SHARE if memory.limit else MOST_ASLEEP_BYTES
        self.asleep = AsleepTails(memory, keep_bytes, min(share, MOST_ASLEEP_BYTES))
        """The cached tails of the streams asleep (``asleep_tails``)."""
        index.on_wake = self._woken

    def flushed(self, stream: Stream, tail: int) -> None:
        """``stream``'s messages below ``tail`` are in Delta: keep the newest ``keep_bytes`` of
        them, held in the budget."""
        stream.mark_flushed(tail)
        stream.trim_flushed(self.keep_bytes)
        self.memory.hold(("tail", stream.uid), stream.flushed_mem_bytes, self._release)

    def touch(self, uid: int) -> None:
        """``uid``'s cache was used: the last the budget lets go."""
        self.memory.touch(("tail", uid))

    def take(self, stream: Stream) -> Kept | None:
        """``stream``'s flushed messages, taken out of it (it goes to sleep: ``keep_asleep``
        keeps them once it does); ``None``: it had none."""
        if not len(stream.mem):
            return None
        kept = None
        stream.trim_flushed(self.keep_bytes)
        first, end = stream.mem_base, stream.flushed_tail
        if end > first:
            runs = stream.mem.runs(first, end, stream.flushed_mem_bytes + 1, at_least_one=True)
            lists = [run.lists() for run in runs]
            data = tuple(chain.from_iterable(part[0] for part in lists))
            if len(data) == end - first:
                stamps = array("q", chain.from_iterable(part[1] for part in lists))
                kept = kept_of(first, data, stamps, sorted(item for item in stream.batches.items() if item[0] < end))
        stream.trim_flushed(0)
        self.memory.drop(("tail", stream.uid))
        return kept

    def keep_asleep(self, uid: int, kept: Kept) -> None:
        """The stream ``uid`` went to sleep: keep what ``take`` took from it (the caller settles
        the budget's entry once its batch is done: ``AsleepTails.settle``)."""
        self.asleep.keep(uid, kept)

    def drop(self, uid: int) -> None:
        """Forget ``uid``'s entry (the stream is removed)."""
        self.memory.drop(("tail", uid))
        self.asleep.forget(uid)
        self.asleep.settle()

    def _woken(self, stream: Stream) -> None:
        """``stream`` was just built from its cold state: its kept tail back in it, if it ends
        where its flushed messages do (``StreamIndex._wake``, before its ``ColdTail``'s)."""
        kept = self.asleep.take(stream.uid)
        if kept is None:
            return
        self.asleep.settle()
        cold = self.index.cold_tails.get(stream.uid)
        if kept_end(kept) != (cold.flushed_tail if cold is not None else stream.tail):
            return
        first, data, _, batches, nbytes = kept
        stream.mem.restore(first, data, kept_stamps(kept))
        stream.mem_base = first
        stream.mem_bytes = stream.flushed_mem_bytes = nbytes
        stream.flushed_tail = kept_end(kept)
        stream.batches.update(batches)
        self.memory.hold(("tail", stream.uid), nbytes, self._release)

    def _let_go(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        stream = self.index.built(key[1])
        if stream is not None:  # (a stream asleep has no entry of its own: ``take`` dropped it)
            stream.trim_flushed(0)
