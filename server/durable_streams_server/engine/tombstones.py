"""Tombstones: a deleted stream's final offset and incarnation, kept for a retention period.

Why: a reader that finds a stream gone cannot tell a routine deletion of a stream it had
read to the end (a stream per session, deleted when done) from one that took messages it
had not read, unless the server remembers where the stream ended. The Spark source asks
(``GET {root}__ds/tombstones/{path}``) and fails only for the second.

What: when a stream is removed (DELETE, TTL expiry, a soft-deleted source going with its
last fork) the engine records a tombstone in the same synchronous step as the removal:
the stream key, its incarnation (``Stream.incarnation``), its final offset (the boundary
after its last message) and the deletion time. A stream soft-deleted while forks read it
gets its tombstone when it is finally removed. A path deleted again replaces its
tombstone (the newest incarnation's end is what a reader of the path needs).

Durability: one reserved record per tombstone (``reserved_records``), submitted right
after the removal's record; ``Engine.delete`` answers once both are durable. It survives
restarts as subscriptions do. A crash between the two records' writes (they are
submitted together, so they normally share a group commit) can leave a removal without
its tombstone: a reader then sees an unknown deletion, which it treats as loss, the safe
side.

Bounds: tombstones older than the retention (``retention_ms``, the server option
``--tombstone-retention-s``, 7 days by default) are forgotten, and at most ``max_count``
are kept (the oldest go first): memory and the records' rows stay bounded however many
streams come and go. Forgetting one submits its deletion record (compaction purges its
rows). Expiry is checked when a tombstone is added or looked up: no timer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..protocol.offsets import encode_seq
from .reserved_records import RESERVED_KEY, ReservedRecords, reserved_path, states_of, stream_root
from .stream import Stream

KIND = "tombstone"
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
DEFAULT_MAX_COUNT = 100_000


@dataclass(frozen=True, slots=True)
class Tombstone:
    uid: int
    """The record's uid (the LSN of its record)."""
    stream: str
    incarnation: str
    messages: int
    """Messages the stream held when it was removed (its final offset's sequence)."""
    deleted_ms: int

    @property
    def final_offset(self) -> str:
        return encode_seq(self.messages)

    def to_state(self) -> dict[str, Any]:
        return {
            RESERVED_KEY: KIND,
            "stream": self.stream,
            "incarnation": self.incarnation,
            "messages": self.messages,
            "deleted_ms": self.deleted_ms,
        }

    def describe(self, path: str) -> dict[str, Any]:
        """The lookup's answer (``path``: the stream's root-relative path)."""
        return {
            "stream": path,
            "incarnation": self.incarnation,
            "final_offset": self.final_offset,
            "messages": self.messages,
            "deleted_at_ms": self.deleted_ms,
        }


def reserved_name(stream: str) -> str:
    return reserved_path(stream, "tombstones", stream[len(stream_root(stream)) :])


class Tombstones:
    """The tombstones by stream key, oldest deletion first (see the module doc)."""

    def __init__(
        self,
        records: ReservedRecords,
        clock: Callable[[], int],
        retention_ms: int = DEFAULT_RETENTION_MS,
        max_count: int = DEFAULT_MAX_COUNT,
    ) -> None:
        self._records = records
        self._clock = clock
        self.retention_ms = retention_ms
        self.max_count = max_count
        self._by_stream: OrderedDict[str, Tombstone] = OrderedDict()
        self._stale: list[Tombstone] = []
        """Recovered tombstones replaced by a newer one of the same path: deleted at the next change."""
        self.last_lsn = 0

    def __len__(self) -> int:
        return len(self._by_stream)

    def load(self, recovered: Mapping[int, Mapping[str, Any]]) -> None:
        found = [
            Tombstone(uid, s["stream"], s["incarnation"], int(s["messages"]), int(s["deleted_ms"]))
            for uid, s in states_of(recovered, KIND).items()
        ]
        for tombstone in sorted(found, key=lambda t: (t.deleted_ms, t.uid)):
            older = self._by_stream.pop(tombstone.stream, None)
            if older is not None:
                self._stale.append(older)
            self._by_stream[tombstone.stream] = tombstone

    def record(self, stream: Stream, deleted_ms: int) -> int:
        """Keep the end of ``stream``, which was just removed; the record's LSN."""
        older = self._by_stream.pop(stream.name, None)
        if older is not None:
            self._forget(older)
        state = Tombstone(0, stream.name, stream.incarnation, stream.tail, deleted_ms).to_state()
        record = self._records.submit(None, reserved_name(stream.name), state)
        self._by_stream[stream.name] = Tombstone(record.uid, stream.name, stream.incarnation, stream.tail, deleted_ms)
        self.last_lsn = record.lsn
        self._expire()
        return record.lsn

    def lookup(self, stream: str) -> Tombstone | None:
        self._expire()
        return self._by_stream.get(stream)

    def _expire(self) -> None:
        for stale in self._stale:
            self._forget(stale)
        self._stale.clear()
        oldest_kept = self._clock() - self.retention_ms
        while self._by_stream:
            oldest = next(iter(self._by_stream.values()))
            if oldest.deleted_ms >= oldest_kept and len(self._by_stream) <= self.max_count:
                break
            del self._by_stream[oldest.stream]
            self._forget(oldest)

    def _forget(self, tombstone: Tombstone) -> None:
        self._records.submit(tombstone.uid, reserved_name(tombstone.stream), None)
