"""Retention policies in the engine: what a new stream gets, a change, and the points maintenance moves.

A stream's policy is fixed when it is created: the limits its request names, else its bucket's
defaults, else the server's (``protocol.retention.resolve``); a change (``PATCH``) is a record,
as is every move of a retention point, so both survive restarts and replay like any state.

Points move only in storage's maintenance passes (``Storage`` calls ``advance`` before each
pass), never on a reader's or a writer's request: each stream's point goes to the newest mark a
limit lets go of (``retention_state``), in one ``RetentionHeader`` record; once the record is
durable, reads below it answer ``410`` (so no reader is shown a point a crash takes back). The
pass then deletes rows below the points already in Delta (``plan``): a point still only in the
WAL is deleted below by a later pass, so a lost WAL can never leave rows missing above the point
that Delta remembers (``RetentionState.note_flushed``, called by the engine's ``on_flushed``).

What wins when rules meet:

* **forks**: a stream's point never passes the first of its messages a fork in this shard still
  reads (``_fork_pins``): what a fork inherits is never removed under it. A fork in another shard
  copied what it inherits when it was made, and holds nothing back;
* **snapshots**: a point never passes the stream's latest snapshot, whose bootstrap needs every
  message after it (a snapshot itself is a retention point, below which everything goes);
* **soft-deleted** streams keep everything for their forks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from ..protocol.retention import RetentionPolicy, resolve
from ..storage.records import RetentionHeader
from .buckets import Bucket
from .ports import StoragePort
from .stream import Stream
from .transitions import LiveState

log = logging.getLogger("durable_streams_server.engine")


class Retention:
    def __init__(
        self,
        storage: StoragePort,
        live: LiveState,
        clock: Callable[[], int],
        default: RetentionPolicy,
        get_live: Callable[[str], Stream],
        earliest_readable: Callable[[Stream], int],
    ) -> None:
        self._storage = storage
        self._live = live
        self._clock = clock
        self.default = default
        self._default_json = default.to_json()
        self._get_live = get_live
        self._earliest_readable = earliest_readable
        self.removed_messages = 0
        """Messages below the points this process moved (counted once, as the points move)."""
        self.removed_bytes = 0

    def policy_for(self, changes: Mapping[str, int | None], bucket: Bucket | None) -> RetentionPolicy:
        """A new stream's policy: the limits its request names, its bucket's, the server's."""
        return resolve(changes, bucket.retention if bucket is not None else {}, self._default_json)

    async def change(self, name: str, changes: Mapping[str, int | None]) -> Stream:
        """Set the limits ``changes`` names (``None``: removed) on the stream ``name``; durable on return."""
        self._storage.check_writable()
        stream = self._get_live(name)
        current = stream.retention.policy if stream.retention is not None else RetentionPolicy()
        policy = current.with_changes(changes)
        header = RetentionHeader(policy=policy.to_json(), seq=None, dropped_bytes=0, ts=self._clock())
        record = self._storage.submit(stream.uid, header)
        self._live.retention(stream, record)
        await self._storage.wait_durable(record.lsn)
        return stream

    async def advance(self) -> int:
        """Move every stream's point to the newest mark a limit lets go of; readers see the new
        points once they are durable, on return. Returns how many points moved."""
        now = self._clock()
        pins = self._fork_pins()
        moved: list[Stream] = []
        last_lsn = 0
        for stream in list(self._live.index.loaded()):
            state = stream.retention
            if state is None or not state.policy or stream.soft_deleted:
                continue
            tail = stream.visible_tail
            snapshot = stream.snapshot_seq if stream.snapshot_seq is not None else tail
            limit = min(tail, snapshot, pins.get(stream.uid, tail))
            at_tail = (tail, stream.bytes_total, stream.last_write_ms) if stream.tail == tail else None
            mark = state.next_cut(limit, tail, stream.bytes_total, now, at_tail)
            if mark is None:
                continue
            seq, dropped_bytes, _ = mark
            previous, previous_bytes = stream.earliest_retained, state.dropped_bytes
            record = self._storage.submit(stream.uid, RetentionHeader(None, seq, dropped_bytes, now))
            self._live.retention(stream, record)
            self.removed_messages += max(0, seq - previous)
            self.removed_bytes += dropped_bytes - previous_bytes
            moved.append(stream)
            last_lsn = record.lsn
        if moved:
            await self._storage.wait_durable(last_lsn)
            for stream in moved:
                if stream.retention is not None:
                    stream.retention.visible_seq = max(stream.retention.visible_seq, stream.retention.seq)
            log.info("retention points moved", extra={"streams": len(moved), "messages_removed": self.removed_messages})
        return len(moved)

    def _fork_pins(self) -> dict[int, int]:
        """source uid -> the first of its messages a fork here still reads (what a fork inherits
        is never removed under it). A fork in another shard copied what it inherits: it pins
        nothing; nor does one whose own point passed its fork point."""
        pins: dict[int, int] = {}
        for fork in self._live.index.loaded():
            if fork.fork_of is None or fork.soft_deleted:
                continue
            reads_from = self._earliest_readable(fork)
            if reads_from < fork.fork_seq:
                pins[fork.fork_of] = min(pins.get(fork.fork_of, reads_from), reads_from)
        return pins

    def plan(self) -> dict[int, int]:
        """uid -> the first sequence to keep, for the streams whose rows below it may go: below
        a snapshot or a point that is in Delta (a snapshot whose record is only in the WAL is not:
        a lost WAL would take it back), with the messages below it (a purge planned earlier would
        run before they land, and count as done); never what a fork here still reads."""
        pins = self._fork_pins()
        plan = {}
        for stream in self._live.index.loaded():  # (a dormant stream has no retention point)
            if stream.soft_deleted:
                continue
            state = stream.retention
            point = min(state.flushed_seq, state.visible_seq) if state is not None else 0
            snapshot = (stream.snapshot_seq or 0) if stream.snapshot_data is None else 0
            seq = min(max(snapshot, point), pins.get(stream.uid, stream.flushed_tail))
            if seq and stream.flushed_tail >= seq:
                plan[stream.uid] = seq
        return plan
