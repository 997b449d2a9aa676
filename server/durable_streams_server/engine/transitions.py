"""The state machine: every stream and bucket, and the transitions that change them.

Theory of operation
-------------------
Each record kind has one transition here (``create``, ``append``, ``snapshot``,
``retention``, ``delete``, ``create_bucket``, ``delete_bucket``; subscription and signing-key records go
to ``subscription_store.SubscriptionLog.apply``), and a transition is the *only* way
that kind changes live state. A live request validates against the applied state,
builds the record, submits it to storage and applies it through its transition, in one
synchronous step; recovery replays the WAL records after the last Delta commit through
the very same transitions (``load`` / ``apply``), in LSN order. So a recovered server is
indistinguishable from the one that crashed: there is no second code path for replay to
drift from, and everything a transition does (fork counts, bucket listings, the
tombstones that make removals durable) happens on both.

Transitions never validate and never fail: a record is a fact once submitted. They also
never touch visibility (``visible_tail``): live requests publish what a record made
visible once it is durable (the engine), while replayed records were durable already.

Removal: a stream with live forks is soft-deleted (data stays readable through the
forks); otherwise it is forgotten, and a soft-deleted source whose last fork this was
goes with it, recursively. Forks in other shards count too: their links are reserved
records, counted into their sources' ``forks`` by ``fork_links.LinkCounts`` as they are
applied (and loaded before the records after them are replayed). Each removal leaves a
tombstone (its state marked deleted) that the next flush writes to Delta (``states_for``),
so the removal outlives the WAL.
"""

from __future__ import annotations

from collections.abc import Callable

from ..protocol import producers
from ..protocol.retention import RetentionPolicy
from ..storage.records import (
    AppendHeader,
    BucketCreateHeader,
    BucketDeleteHeader,
    CreateHeader,
    DeleteHeader,
    Header,
    Record,
    RetentionHeader,
    SigningKeysHeader,
    SnapshotHeader,
    SubscriptionHeader,
    is_kind,
)
from ..storage.view import Recovery, StreamState
from .buckets import Bucket, Buckets
from .fork_links import LinkCounts
from .retention_state import RetentionState
from .stream import Stream
from .stream_index import StreamIndex
from .subscription_store import SubscriptionLog
from .types import StreamHooks


class LiveState:
    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.index = StreamIndex()
        self.streams = self.index.by_name
        self.by_uid = self.index.by_uid
        self.buckets = Buckets()
        self._tombstones: dict[int, StreamState] = {}
        self.subscriptions = SubscriptionLog()
        self.links = LinkCounts(self.by_uid.get)
        """Forks in other shards counted into their sources' ``forks`` (``fork_links``)."""
        self.hooks: StreamHooks | None = None
        """Told about removals and (by the engine) newly visible tails; set after recovery."""

    # -- recovery ---------------------------------------------------------------------

    def load(self, recovery: Recovery) -> None:
        """The Delta states (the dormant ones held unparsed: ``stream_index``), then the WAL
        records after them through the transitions."""
        live = [state for state in recovery.states.values() if not state.get("deleted")]
        for state in live:
            if state.get("type") == "bucket":
                self.buckets.load(state)
        now = self.clock()
        for state in live:
            if state.get("type") != "bucket":
                stream = Stream.from_state(state)
                stream.last_access_ms = max(stream.last_access_ms, now)  # (see ``StreamIndex._wake``)
                self.by_uid[stream.uid] = stream
                self.streams[stream.name] = stream
        self.index.hold(recovery.dormant, now)
        self.buckets.index_streams(self.index.name_column())
        for stream in self.index.loaded():
            if stream.fork_of is not None and stream.fork_of in self.by_uid:
                self.by_uid[stream.fork_of].forks += 1
        self.subscriptions.load(recovery.subscriptions)
        self.links.load(recovery.subscriptions)
        for record in recovery.records:
            changed = self.apply(record)
            if isinstance(changed, Stream):
                changed.visible_tail = changed.tail  # durable already
                changed.visible_closed = changed.closed
                if changed.retention is not None:
                    changed.retention.visible_seq = changed.retention.seq
        for stream in self.index.loaded():
            if stream.soft_deleted and stream.forks == 0 and stream.uid in self.by_uid:
                self._remove(stream)
        self.index.rebuild_names()

    def apply(self, record: Record[Header]) -> Stream | Bucket | None:
        """Apply any record through its transition; return what it changed."""
        if is_kind(record, CreateHeader):
            return self.create(record)
        if is_kind(record, BucketCreateHeader):
            return self.create_bucket(record)
        if is_kind(record, BucketDeleteHeader):
            self.delete_bucket(self.buckets.by_uid[record.uid], record)
            return None
        if is_kind(record, SubscriptionHeader) or is_kind(record, SigningKeysHeader):
            self.links.apply(record)
            tombstone = self.subscriptions.apply(record)
            if tombstone is not None:
                self._tombstones[record.uid] = tombstone
            return None
        stream = self.by_uid[record.uid]
        if is_kind(record, AppendHeader):
            self.append(stream, record)
        elif is_kind(record, SnapshotHeader):
            self.snapshot(stream, record)
        elif is_kind(record, RetentionHeader):
            self.retention(stream, record)
        elif is_kind(record, DeleteHeader):
            self.delete(stream, record)
        return stream

    # -- what the next flush writes ---------------------------------------------------

    def states_for(self, uids: set[int]) -> dict[int, StreamState]:
        """The current state of each uid, plus every tombstone not yet handed out (building no
        sleeping stream)."""
        now = self.clock()
        states: dict[int, StreamState] = {}
        for uid in uids:
            stream = self.index.built(uid)
            bucket = self.buckets.by_uid.get(uid)
            if stream is not None:
                states[uid] = stream.to_state(written_ms=now)
            elif bucket is not None:
                states[uid] = bucket.to_state(written_ms=now)
            elif uid in self._tombstones:
                states[uid] = self._tombstones.pop(uid)
            else:  # (appended asleep, ``cold_appends``: its state as the cold index keeps it)
                asleep = self.index.asleep_state(uid)
                if asleep is not None:
                    asleep["written_ms"] = now
                    states[uid] = asleep
        states.update(self._tombstones)
        self._tombstones.clear()
        return states

    # -- transitions ------------------------------------------------------------------

    def create(self, record: Record[CreateHeader]) -> Stream:
        header = record.header
        now = header.ts
        stream = Stream(
            name=header.name,
            uid=record.uid,
            content_type=header.content_type,
            created_ms=now,
            ttl_s=header.ttl_s,
            expires_at=header.expires_at,
            expires_at_ms=header.expires_at_ms,
            closed=header.closed,
            fork_of=header.fork_of,
            fork_seq=header.fork_seq,
            fork_offset=header.fork_offset,
            fork_sub_offset=header.fork_sub_offset,
            fork_source=header.fork_source,
            fork_link=header.fork_link,
            base_seq=header.first_seq if header.fork_source is not None else 0,
            last_access_ms=now,
            last_write_ms=now,
            retention=RetentionState(RetentionPolicy.from_json(header.retention)) if header.retention else None,
        )
        first = header.first_seq
        stream.tail = stream.visible_tail = stream.mem_base = stream.flushed_tail = first
        seq = first
        for size in header.batches:
            stream.remember(seq, record.messages[seq - first : seq - first + size], now)
            seq += size
        stream.tail = seq
        stream.last_lsn = record.lsn
        if stream.fork_of is not None:
            self.by_uid[stream.fork_of].forks += 1
        self.by_uid[stream.uid] = stream
        self.streams[stream.name] = stream
        self.buckets.stream_added(stream.name)
        return stream

    def append(self, stream: Stream, record: Record[AppendHeader]) -> None:
        header = record.header
        if stream.retention is not None and record.messages:
            stream.retention.note_append(header.first_seq, stream.bytes_total, stream.last_write_ms, header.ts)
        stream.last_write_ms = header.ts
        if record.messages:
            stream.remember(header.first_seq, record.messages, header.ts)
            stream.tail = header.first_seq + len(record.messages)
        if header.producer is not None:
            producer_id, epoch, seq = header.producer
            stream.producers[producer_id] = producers.ProducerState(epoch, seq)
        if header.stream_seq is not None:
            stream.stream_seq = header.stream_seq
        if header.close:
            stream.closed = True
            if header.producer is not None:
                stream.closed_by = header.producer
        stream.last_lsn = record.lsn

    def snapshot(self, stream: Stream, record: Record[SnapshotHeader]) -> None:
        stream.snapshot_seq = record.header.seq
        stream.snapshot_content_type = record.header.content_type
        stream.snapshot_data = record.messages[0]
        stream.snapshot_lsn = stream.last_lsn = record.lsn

    def retention(self, stream: Stream, record: Record[RetentionHeader]) -> None:
        header = record.header
        if stream.retention is None:
            stream.retention = RetentionState(RetentionPolicy())
        if header.policy is not None:
            policy = RetentionPolicy.from_json(header.policy)
            stream.retention.change(policy, stream.tail, stream.bytes_total, header.ts)
        if header.seq is not None:
            stream.retention.cut(header.seq, header.dropped_bytes)
        if not stream.retention.policy and not stream.retention.seq:
            stream.retention = None  # (no policy left and nothing removed: a plain stream again)
        stream.last_lsn = record.lsn

    def delete(self, stream: Stream, record: Record[DeleteHeader]) -> None:
        if stream.forks > 0:
            stream.soft_deleted = True
            self._tombstones.pop(stream.uid, None)
            if self.hooks is not None:
                self.hooks.on_removed(stream)
        else:
            self._remove(stream)
        stream.last_lsn = record.lsn
        stream.wake()

    def create_bucket(self, record: Record[BucketCreateHeader]) -> Bucket:
        header = record.header
        bucket = Bucket(header.bucket_id, record.uid, header.ts, retention=dict(header.retention or {}))
        self.buckets.add(bucket)
        return bucket

    def delete_bucket(self, bucket: Bucket, record: Record[BucketDeleteHeader]) -> None:
        self.buckets.remove(bucket)
        self._tombstones[bucket.uid] = bucket.to_state(written_ms=self.clock(), deleted=True)

    def _remove(self, stream: Stream) -> None:
        """Forget a stream; a soft-deleted source whose last fork this was goes too."""
        self.by_uid.pop(stream.uid, None)
        if self.streams.get(stream.name) is stream:
            del self.streams[stream.name]
            self.buckets.stream_removed(stream.name)
        self._tombstones[stream.uid] = stream.to_state(written_ms=self.clock(), deleted=True)
        stream.wake()
        if self.hooks is not None:
            self.hooks.on_removed(stream)
        if stream.fork_of is not None:
            source = self.by_uid.get(stream.fork_of)
            if source is not None:
                source.forks -= 1
                if source.forks == 0 and source.soft_deleted:
                    self._remove(source)
