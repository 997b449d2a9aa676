"""Retention policies in the engine: what a new stream gets, a change, and the points maintenance moves.

A stream's policy is fixed when it is created: the limits its request names, else its bucket's
defaults, else the server's (``protocol.retention.resolve``); a change (``PATCH``) is a record,
as is every move of a retention point, so both survive restarts and replay like any state.

Points move only in storage's maintenance passes (``Storage`` calls ``advance`` before each
pass), never on a reader's or a writer's request: each stream's point goes to the newest mark a
limit lets go of (``retention_state``), in one ``RetentionHeader`` record, from which on reads
below it answer ``410``. The pass then deletes rows below the points already in Delta
(``plan``): a point still only in the WAL is deleted below by a later pass, so a lost WAL can
never leave rows missing above the point that Delta remembers.

What wins when rules meet:

* **forks**: a stream with forks (here or, through fork links, in other shards) keeps its point
  where it is until its last fork is deleted: what a fork inherits is never removed under it;
* **snapshots**: a point never passes the stream's latest snapshot, whose bootstrap needs every
  message after it (a snapshot itself is a retention point, below which everything goes);
* **soft-deleted** streams keep everything for their forks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from ..protocol.retention import RetentionPolicy, resolve
from ..storage.records import RetentionHeader
from ..storage.view import StreamState
from .buckets import Bucket
from .ports import StoragePort
from .stream import Stream
from .transitions import LiveState

log = logging.getLogger("durable_streams_server.engine")


class Retention:
    def __init__(
        self, storage: StoragePort, live: LiveState, clock: Callable[[], int], default: RetentionPolicy
    ) -> None:
        self._storage = storage
        self._live = live
        self._clock = clock
        self.default = default
        self.removed_messages = 0
        """Messages below the points this process moved (counted once, as the points move)."""
        self.removed_bytes = 0

    def policy_for(self, changes: Mapping[str, int | None], bucket: Bucket | None) -> RetentionPolicy:
        """A new stream's policy: the limits its request names, its bucket's, the server's."""
        return resolve(changes, bucket.retention if bucket is not None else {}, self.default.to_json())

    async def change(self, get_live: Callable[[str], Stream], name: str, changes: Mapping[str, int | None]) -> Stream:
        """Set the limits ``changes`` names (``None``: removed) on the stream ``name``; durable on return."""
        self._storage.check_writable()
        stream = get_live(name)
        current = stream.retention.policy if stream.retention is not None else RetentionPolicy()
        policy = current.with_changes(changes)
        header = RetentionHeader(policy=policy.to_json(), seq=None, dropped_bytes=0, ts=self._clock())
        record = self._storage.submit(stream.uid, header)
        self._live.retention(stream, record)
        await self._storage.wait_durable(record.lsn)
        return stream

    async def advance(self) -> int:
        """Move every stream's point to the newest mark a limit lets go of; durable on return.
        Returns how many points moved."""
        now = self._clock()
        last_lsn = 0
        moved = 0
        for stream in list(self._live.index.loaded()):
            state = stream.retention
            if state is None or not state.policy or stream.forks or stream.soft_deleted:
                continue
            tail = stream.visible_tail
            limit = tail if stream.snapshot_seq is None else min(tail, stream.snapshot_seq)
            mark = state.next_cut(limit, tail, stream.bytes_total, now)
            if mark is None:
                continue
            seq, dropped_bytes, _ = mark
            self.removed_messages += seq - state.seq
            self.removed_bytes += dropped_bytes - state.dropped_bytes
            header = RetentionHeader(policy=None, seq=seq, dropped_bytes=dropped_bytes, ts=now)
            record = self._storage.submit(stream.uid, header)
            self._live.retention(stream, record)
            last_lsn, moved = record.lsn, moved + 1
        if moved:
            log.info("retention points moved", extra={"streams": moved, "messages_removed": self.removed_messages})
            await self._storage.wait_durable(last_lsn)
        return moved

    def on_flushed(self, streams: Iterable[tuple[Stream, StreamState]]) -> None:
        """The flusher wrote these states to Delta: their points are what maintenance may delete below."""
        for stream, state in streams:
            if stream.retention is not None and (written := state.get("retention")):
                stream.retention.flushed_seq = max(stream.retention.flushed_seq, written.get("seq", 0))

    def plan(self) -> dict[int, int]:
        """uid -> the first sequence to keep, for the streams whose rows below it may go: below
        a snapshot or a point that is in Delta, with the messages below it (a purge planned
        earlier would run before they land, and count as done); none while forks read them."""
        plan = {}
        for stream in self._live.index.loaded():  # (a dormant stream has no retention point)
            if stream.forks or stream.soft_deleted:
                continue
            flushed_point = stream.retention.flushed_seq if stream.retention is not None else 0
            seq = max(stream.snapshot_seq or 0, flushed_point)
            if seq and stream.flushed_tail >= seq:
                plan[stream.uid] = seq
        return plan
