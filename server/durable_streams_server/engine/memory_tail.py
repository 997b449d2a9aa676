"""One stream's in-memory tail: the messages from ``Stream.mem_base`` on, in chunks.

Plain appends extend a chunk of a Python list (one ``bytes`` per message, as they arrived)
and an ``array`` of their append times; a bulk append adds its ``MessageBatch``'s Arrow
array as a chunk of its own, so its messages stay in the batch's two buffers: remembering,
measuring, trimming and reading them (``runs``) slices those buffers without a Python
object per message. Chunks are in sequence order and contiguous.

The append times and the chunks' first seqs are ``array``s, not lists: the cyclic collector
(``collector.py``) follows none of an array's items, where a list of append times is an int
object per message to visit in every full collection (and 36 bytes a message, not 8).
"""

from __future__ import annotations

import bisect
import itertools
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..storage.message_batch import MessageBatch
from .runs import ArrowRun, MemoryRun, Run


@dataclass(slots=True)
class _Lists:
    first: int
    data: list[bytes] = field(default_factory=list)
    stamps: array[int] = field(default_factory=lambda: array("q"))

    def __len__(self) -> int:
        return len(self.data)

    def sizes(self, start: int, stop: int) -> np.ndarray:
        return np.fromiter(map(len, itertools.islice(self.data, start, stop)), dtype=np.int64, count=stop - start)

    def get(self, index: int) -> bytes:
        return self.data[index]

    def take(self, start: int, stop: int, budget: int, forced: bool) -> tuple[int, int]:
        """How many messages from ``start`` a read takes (each while budget remains before
        it; the first one anyway if ``forced``), and their bytes."""
        data, end, used = self.data, start, 0
        while end < stop and (used < budget or (forced and end == start)):
            used += len(data[end])
            end += 1
        return end - start, used

    def run(self, start: int, stop: int) -> Run:
        return MemoryRun(self.first + start, self.data[start:stop], self.stamps[start:stop])

    def first_stamped(self, at_ms: int, start: int, stop: int) -> int | None:
        late = np.flatnonzero(np.frombuffer(self.stamps[start:stop], np.int64) >= at_ms)
        return start + int(late[0]) if len(late) else None

    def drop(self, count: int) -> None:
        del self.data[:count]
        del self.stamps[:count]
        self.first += count


@dataclass(slots=True)
class _Arrow:
    first: int
    data: pa.BinaryArray
    ts_ms: int

    def __len__(self) -> int:
        return len(self.data)

    def sizes(self, start: int, stop: int) -> np.ndarray:
        return MessageBatch(self.data.slice(start, stop - start)).sizes().astype(np.int64)

    def get(self, index: int) -> bytes:
        value = self.data[index].as_py()
        assert isinstance(value, bytes)
        return value

    def take(self, start: int, stop: int, budget: int, forced: bool) -> tuple[int, int]:
        sizes = self.sizes(start, stop)
        ends = np.cumsum(sizes)
        kept = int(np.searchsorted(ends - sizes, budget, side="left"))
        kept = max(kept, 1 if forced and stop > start else 0)
        return kept, int(ends[kept - 1]) if kept else 0

    def run(self, start: int, stop: int) -> Run:
        return ArrowRun(self.first + start, self.data.slice(start, stop - start), self.ts_ms)

    def first_stamped(self, at_ms: int, start: int, stop: int) -> int | None:
        return start if start < stop and self.ts_ms >= at_ms else None

    def drop(self, count: int) -> None:
        self.data = self.data.slice(count)
        self.first += count


class MemoryTail:
    """The chunks and their first seqs are empty tuples while there are none (a new stream, or
    one whose messages were all let go): a stream awake in memory is then two containers
    for the collector to scan, not four (``collector.py``)."""

    __slots__ = ("_chunks", "_firsts", "count")

    def __init__(self) -> None:
        self._chunks: list[_Lists | _Arrow] | tuple[()] = ()
        self._firsts: array[int] | tuple[()] = ()
        self.count = 0

    def _append(self, chunk: _Lists | _Arrow) -> None:
        if not self._chunks:
            self._chunks, self._firsts = [], array("q")
        assert isinstance(self._chunks, list) and isinstance(self._firsts, array)
        self._chunks.append(chunk)
        self._firsts.append(chunk.first)

    def __len__(self) -> int:
        return self.count

    def add(self, first_seq: int, messages: Sequence[bytes], ts_ms: int) -> int:
        """Messages ``first_seq…`` (right after the last ones); returns their bytes."""
        if type(messages) is MessageBatch:
            self._append(_Arrow(first_seq, messages.array, ts_ms))
            self.count += len(messages)
            return messages.nbytes
        last = self._chunks[-1] if self._chunks else None
        if not isinstance(last, _Lists):
            last = _Lists(first_seq)
            self._append(last)
        last.data.extend(messages)
        last.stamps.extend([ts_ms] * len(messages))
        self.count += len(messages)
        return sum(map(len, messages))

    def _locate(self, seq: int) -> int:
        return bisect.bisect_right(self._firsts, seq) - 1

    def get(self, seq: int) -> bytes:
        chunk = self._chunks[self._locate(seq)]
        return chunk.get(seq - chunk.first)

    def bytes_between(self, start: int, stop: int) -> int:
        """The bytes of messages ``start <= seq < stop`` (all in memory): ``sizes`` summed,
        without an array for the one or few plain messages a flush marks per stream."""
        if start >= stop or not self._chunks:
            return 0
        chunk = self._chunks[max(0, self._locate(start))]
        if isinstance(chunk, _Lists) and stop <= chunk.first + len(chunk):
            return sum(map(len, itertools.islice(chunk.data, start - chunk.first, stop - chunk.first)))
        return int(self.sizes(start, stop).sum())

    def sizes(self, start: int, stop: int) -> np.ndarray:
        """The sizes of messages ``start <= seq < stop`` (all in memory)."""
        if start >= stop or not self._chunks:
            return np.zeros(0, dtype=np.int64)
        parts = []
        index = max(0, self._locate(start))
        while start < stop and index < len(self._chunks):
            chunk = self._chunks[index]
            end = min(stop, chunk.first + len(chunk))
            parts.append(chunk.sizes(start - chunk.first, end - chunk.first))
            start, index = end, index + 1
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def runs(self, start: int, stop: int, budget: int, *, at_least_one: bool) -> list[Run]:
        """Whole messages from ``start`` (before ``stop``), each taken while ``budget`` remains
        before it (at least one if asked): one run per chunk touched."""
        runs: list[Run] = []
        index = max(0, self._locate(start))
        while start < stop and index < len(self._chunks):
            chunk = self._chunks[index]
            end = min(stop, chunk.first + len(chunk))
            kept, used = chunk.take(start - chunk.first, end - chunk.first, budget, at_least_one and not runs)
            if not kept:
                break
            runs.append(chunk.run(start - chunk.first, start - chunk.first + kept))
            budget -= used
            start += kept
            if start < end:
                break  # the budget is spent
            index += 1
        return runs

    def first_stamped(self, at_ms: int, start: int, stop: int) -> int | None:
        """The first of messages ``start <= seq < stop`` (all in memory) appended at or after
        ``at_ms`` (``engine.time_lookup``), ``None`` if none was."""
        index = max(0, self._locate(start))
        while start < stop and index < len(self._chunks):
            chunk = self._chunks[index]
            end = min(stop, chunk.first + len(chunk))
            found = chunk.first_stamped(at_ms, start - chunk.first, end - chunk.first)
            if found is not None:
                return chunk.first + found
            start, index = end, index + 1
        return None

    def drop(self, count: int) -> None:
        """Forget the oldest ``count`` messages."""
        self.count -= count
        if not self.count:
            self._chunks, self._firsts = (), ()
            return
        chunks, firsts = self._chunks, self._firsts
        assert isinstance(chunks, list) and isinstance(firsts, array)
        while count:
            chunk = chunks[0]
            if len(chunk) <= count:
                count -= len(chunk)
                del chunks[0]
                del firsts[0]
            else:
                chunk.drop(count)
                firsts[0] = chunk.first
                count = 0
