"""The cached tails of sleeping streams: their newest flushed messages, kept for reads.

A built stream keeps its newest flushed messages in memory for reads (``tail_caches``). A
sleeping stream has no ``Stream`` to keep them in (``stream_index``), so without this module
every read of its messages went to Delta: a stream appended to asleep (``cold_appends``) and
read back seconds later, or one read now and again on a busy server (which puts streams to
sleep a second after their use: ``idle``), paid a Delta read each time (one 100-byte message
of a sleeping stream: 3.4-6.9 ms on a quiet server, 10-70 ms under appends, against 0.5 ms
from memory).

So they are kept here, by uid, from two places: a built stream going to sleep leaves its
cached tail (``IdleStreams``), and a flush that commits the records of a stream appended to
asleep leaves those records (``ColdTails.flushed``). The next lookup that builds the stream
gives them back to its ``Stream`` (``StreamIndex._wake``), as if it had stayed built.

What is kept is plain tuples of ints and bytes, the append times included (``bytes`` of int64,
not an ``array``: an ``array`` is a container the cyclic collector tracks, and so is the tuple
holding it): a collection that sees such a tuple stops tracking it (a tuple of tuples, the
append batches', once a collection has seen the inner ones untracked), so full collections
do not scan the kept tails (``collector.py``). With 100,000 tails kept with
an ``array`` each, every full collection scanned 200,000 objects more (13-15 ms).
All of them together are at most ``max_bytes`` (``ENTRY_BYTES`` counted per stream beyond its
messages), least recently kept let go first: a million streams written at random keep the
newest ones' tails, not a million. They are held in the memory budget as one entry (``KEY``),
first in its order: under pressure the sleeping streams' tails all go before any built
stream's. The entry is brought up to date once per batch of changes (``settle``: a flush, a
sweep of idle streams, a wake), not once per stream: held per stream, the budget's own
bookkeeping was half of the cost a flush paid for each stream appended to asleep.

Safe because history is immutable: the kept messages are the ones in Delta, and they are
given back only when they end where the woken stream's flushed messages end (``end``), else
dropped. A restart keeps nothing: its reads go to Delta, as they always did.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence

from .memory import MemoryBudget

Kept = tuple[int, tuple[bytes, ...], bytes, tuple[tuple[int, int], ...], int]
"""One stream's kept tail: the first message's seq, the messages, their append times (ms, int64
in native byte order: ``kept_stamps``), the append batches among them (first seq, length:
``Stream.batches``), and their bytes."""

_STAMP_BYTES = 8

KEY = ("tails", "asleep")
"""The memory budget's entry for all the kept tails."""

ENTRY_BYTES = 640
"""What one stream's entry costs beyond its messages: the tuples, the array, its slots in this
map and in the budget's, their keys (``tracemalloc``: 655 bytes for a tail of one message)."""


def kept_end(kept: Kept) -> int:
    """The seq after the kept messages."""
    return kept[0] + len(kept[1])


def kept_of(first: int, data: tuple[bytes, ...], stamps: array[int], batches: Iterable[tuple[int, int]]) -> Kept:
    """A kept tail of ``data`` from seq ``first``, appended at ``stamps``."""
    return first, data, stamps.tobytes(), tuple(batches), sum(map(len, data))


def kept_stamps(kept: Kept) -> array[int]:
    """The append times of ``kept``'s messages."""
    stamps = array("q")
    stamps.frombytes(kept[2])
    return stamps


def trimmed(kept: Kept, keep_bytes: int) -> Kept | None:
    """``kept`` without its oldest messages beyond the newest ``keep_bytes``; ``None``: none fit."""
    first, data, stamps, batches, nbytes = kept
    drop = 0
    while nbytes > keep_bytes and drop < len(data):
        nbytes -= len(data[drop])
        drop += 1
    if drop == len(data):
        return None
    if not drop:
        return kept
    first += drop
    return first, data[drop:], stamps[drop * _STAMP_BYTES :], tuple(b for b in batches if b[0] >= first), nbytes


class AsleepTails:
    def __init__(self, memory: MemoryBudget, keep_bytes: int, max_bytes: int) -> None:
        self.memory = memory
        self.keep_bytes = keep_bytes
        """Bytes kept per stream, at most (the newest)."""
        self.max_bytes = max_bytes
        """Bytes kept for all sleeping streams together, at most (their entries' included)."""
        self._kept: OrderedDict[int, Kept] = OrderedDict()
        self._bytes = 0
        self._held = 0
        """What the budget's entry says (``settle``)."""

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, uid: int) -> bool:
        return uid in self._kept

    @property
    def nbytes(self) -> int:
        """What the kept tails count for, their entries included."""
        return self._bytes

    def keep(self, uid: int, kept: Kept) -> None:
        """``uid`` sleeps with ``kept`` as its cached tail (instead of any it had)."""
        if uid in self._kept:
            self.forget(uid)
        fitted = kept if kept[4] <= self.keep_bytes else trimmed(kept, self.keep_bytes)
        if fitted is None or not fitted[1]:
            return
        size = fitted[4] + ENTRY_BYTES
        if size > self.max_bytes:
            return
        self._kept[uid] = fitted
        self._bytes += size
        while self._bytes > self.max_bytes:  # (the least recently kept first)
            self._bytes -= self._kept.popitem(last=False)[1][4] + ENTRY_BYTES

    def extend(self, uid: int, records: Sequence[tuple[int, tuple[bytes, ...], int]]) -> None:
        """Records of the sleeping ``uid`` (first seq, messages, append time) are in Delta now:
        its tail continues with them (starts with them where it does not end at the first)."""
        kept = self._kept.get(uid)
        if kept is None and len(records) == 1:  # (the commonest: one append to a stream asleep)
            seq, messages, ts_ms = records[0]
            batches = ((seq, len(messages)),) if len(messages) > 1 else ()
            self.keep(uid, kept_of(seq, messages, array("q", [ts_ms]) * len(messages), batches))
            return
        first, data = (kept[0], list(kept[1])) if kept is not None else (0, [])
        times = kept_stamps(kept) if kept is not None else array("q")
        batches_list = list(kept[3]) if kept is not None else []
        for seq, messages, ts_ms in records:
            if first + len(data) != seq:  # (not where the kept ones end: start afresh)
                first, data, times, batches_list = seq, [], array("q"), []
            data.extend(messages)
            times.extend([ts_ms] * len(messages))
            if len(messages) > 1:
                batches_list.append((seq, len(messages)))
        if data:
            self.keep(uid, kept_of(first, tuple(data), times, batches_list))

    def take(self, uid: int) -> Kept | None:
        """``uid``'s kept tail, no longer kept here (its stream is built)."""
        kept = self._kept.get(uid)
        if kept is not None:
            self.forget(uid)
        return kept

    def forget(self, uid: int) -> None:
        """Let ``uid``'s kept tail go."""
        kept = self._kept.pop(uid, None)
        if kept is not None:
            self._bytes -= kept[4] + ENTRY_BYTES

    def settle(self) -> None:
        """The budget's entry says what is kept now (after a batch of changes)."""
        if self._bytes != self._held:
            self._held = self._bytes
            self.memory.hold(KEY, self._bytes, self._let_go, first=True)

    def _let_go(self, _key: Hashable) -> None:
        """The budget let the entry go: nothing is kept."""
        self._kept.clear()
        self._bytes = self._held = 0
