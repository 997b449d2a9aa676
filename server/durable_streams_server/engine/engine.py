"""The engine: every stream's live state, and the only code that changes it.

Theory of operation
-------------------
All mutations run on the event loop. Each one validates the request against the
*applied* state, builds the record that describes the change, hands it to
``Storage.submit`` and applies it to memory — all in one synchronous step with no
``await`` in between. That step is the per-stream (and per-producer) serialization the
protocol requires, for free. Only then does the request await durability of the
stream's newest record, so every answer (including duplicates and conflicts, which
depend on state that may still be in flight) reflects durable state. Before any of it,
``storage.check_writable()`` refuses (503) writes storage could not make durable soon
(object-store outage, full WAL), so a refused write changes nothing.

The very same ``_apply_*`` functions replay records at recovery, so a replayed server is
indistinguishable from the one that crashed.

Readers see ``visible_tail``: storage calls ``on_durable`` after each group commit and
the engine publishes the tails those records produced, waking long-poll and SSE waiters.

Deletion follows the fork rules: a stream with live forks is soft-deleted (its data
stays readable through the forks, its URL answers 410); removing the last fork of a
soft-deleted stream removes that stream too, recursively. TTL expiry is checked lazily
on access and behaves like a delete.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..protocol import producers
from ..protocol.errors import Conflict, Gone, NotFound
from ..protocol.headers import DEFAULT_CONTENT_TYPE, is_json, normalize_content_type
from ..protocol.json_mode import split_messages
from ..protocol.offsets import encode_seq
from ..storage.committer import Recovery, Storage
from ..storage.records import Record, RecordKind
from . import forks
from .buckets import Bucket, Buckets, bucket_of
from .history import HistoryCache
from .stream import Stream
from .types import AppendOutcome, AppendRequest, CreateOutcome, CreateRequest, StreamHooks

log = logging.getLogger("durable_streams_server.engine")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    tail_cache_bytes: int = 4 * 1024 * 1024
    history_cache_bytes: int = 64 * 1024 * 1024
    """History read from Delta kept for the next sequential read (``history``); 0: off."""
    read_ahead_bytes: int = 8 * 1024 * 1024
    max_streams_per_bucket: int = 0
    """0: no limit."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class Engine:
    def __init__(
        self, storage: Storage, config: EngineConfig | None = None, clock: Callable[[], int] = _now_ms
    ) -> None:
        self.storage = storage
        self.config = config or EngineConfig()
        self.clock = clock
        self.streams: dict[str, Stream] = {}
        self.by_uid: dict[int, Stream] = {}
        self._becoming_visible: deque[tuple[int, Stream, int, bool]] = deque()
        self._tombstones: dict[int, dict[str, Any]] = {}
        self.buckets = Buckets()
        self.history = HistoryCache(self.config.history_cache_bytes)
        self.subscription_hooks: StreamHooks | None = None
        storage.attach(self)

    # -- recovery ---------------------------------------------------------------------

    def load(self, recovery: Recovery) -> None:
        live = [state for state in recovery.states.values() if not state.get("deleted")]
        for state in live:
            if state.get("type") == "bucket":
                self.buckets.load(state)
        for state in live:
            if state.get("type") != "bucket":
                stream = Stream.from_state(state)
                self.by_uid[stream.uid] = stream
                self.buckets.stream_added(stream.name)
        for stream in self.by_uid.values():
            if stream.fork_of is not None and stream.fork_of in self.by_uid:
                self.by_uid[stream.fork_of].forks += 1
        for record in recovery.records:
            self._replay(record)
        for stream in list(self.by_uid.values()):
            if stream.soft_deleted and stream.forks == 0 and stream.uid in self.by_uid:
                self._remove(stream)
        self.streams = {s.name: s for s in self.by_uid.values()}
        now = self.clock()
        for stream in self.streams.values():
            # Access times are persisted lazily; never let a restart expire a stream early.
            stream.last_access_ms = max(stream.last_access_ms, now)

    def _replay(self, record: Record) -> None:
        if record.kind is RecordKind.BUCKET_CREATE:
            self._apply_bucket_create(record)
            return
        if record.kind is RecordKind.BUCKET_DELETE:
            self.buckets.remove(self.buckets.by_uid[record.uid])
            return
        if record.kind is RecordKind.CREATE:
            stream = self._apply_create(record)
            self.streams[stream.name] = stream
        else:
            stream = self.by_uid[record.uid]
            if record.kind is RecordKind.APPEND:
                self._apply_append(stream, record)
            elif record.kind is RecordKind.SNAPSHOT:
                self._apply_snapshot(stream, record)
            else:
                self._apply_delete(stream)
        stream.visible_tail = stream.tail
        stream.visible_closed = stream.closed

    # -- StateView (called by storage) ------------------------------------------------

    def snapshot_states(self, uids: set[int]) -> dict[int, dict[str, Any]]:
        now = self.clock()
        states: dict[int, dict[str, Any]] = {}
        for uid in uids:
            stream = self.by_uid.get(uid)
            bucket = self.buckets.by_uid.get(uid)
            if stream is not None:
                states[uid] = stream.to_state(written_ms=now)
            elif bucket is not None:
                states[uid] = bucket.to_state(written_ms=now)
            elif uid in self._tombstones:
                states[uid] = self._tombstones.pop(uid)
        states.update(self._tombstones)
        self._tombstones.clear()
        return states

    def on_durable(self, lsn: int) -> None:
        queue = self._becoming_visible
        woken: dict[int, Stream] = {}
        while queue and queue[0][0] <= lsn:
            _, stream, tail, closed = queue.popleft()
            stream.visible_tail = tail
            stream.visible_closed = closed
            woken[stream.uid] = stream
        for stream in woken.values():
            stream.wake()
        if self.subscription_hooks is not None:
            for stream in woken.values():
                if self.by_uid.get(stream.uid) is stream and not stream.soft_deleted:
                    self.subscription_hooks.on_visible(stream)

    def on_flushed(self, states: Mapping[int, dict[str, Any]]) -> None:
        keep = self.config.tail_cache_bytes
        for uid, state in states.items():
            stream = self.by_uid.get(uid)
            if stream is not None:
                stream.flushed_tail = max(stream.flushed_tail, state["tail"])
                stream.trim_flushed(keep)
                if stream.snapshot_lsn == state.get("snapshot_lsn"):
                    stream.snapshot_data = None  # in Delta now

    def earliest_readable(self, stream: Stream) -> int:
        """Reads below this answer 410: the stream's own snapshot, or below its fork point
        whatever its ancestry no longer retains."""
        earliest = stream.earliest_retained
        if stream.fork_of is not None and stream.fork_of in self.by_uid:
            earliest = max(earliest, min(stream.fork_seq, self.earliest_readable(self.by_uid[stream.fork_of])))
        return earliest

    def retention_plan(self) -> dict[int, int]:
        # Only once the messages below the snapshot are in Delta: a purge planned earlier
        # would run before they land, and count as done.
        return {
            stream.uid: stream.snapshot_seq
            for stream in self.by_uid.values()
            if stream.snapshot_seq
            and stream.forks == 0
            and not stream.soft_deleted
            and stream.flushed_tail >= stream.snapshot_seq
        }

    # -- lookups ----------------------------------------------------------------------

    def find(self, name: str) -> Stream | None:
        """The stream at ``name`` (soft-deleted ones included), expiring it if due."""
        stream = self.streams.get(name)
        if stream is not None and not stream.soft_deleted and stream.expired(self.clock()):
            self._submit_delete(stream)
            stream = self.streams.get(name)
        return stream

    def get_live(self, name: str) -> Stream:
        stream = self.find(name)
        if stream is None:
            raise NotFound(f"stream {name!r} not found", code="STREAM_NOT_FOUND")
        if stream.soft_deleted:
            raise Gone(f"stream {name!r} was deleted", code="STREAM_DELETED")
        return stream

    def touch(self, stream: Stream) -> None:
        """Reads and writes renew a sliding TTL (HEAD does not)."""
        stream.last_access_ms = self.clock()

    # -- create -----------------------------------------------------------------------

    async def create(self, request: CreateRequest) -> CreateOutcome:
        self.storage.check_writable()
        sliced = None
        if request.fork_from is not None and request.fork_sub_offset and request.fork_offset is not None:
            # History is immutable, so the message a sub-offset slices can be fetched
            # before the synchronous step without racing any writer.
            source = self.find(request.fork_from)
            if source is not None and request.fork_offset.seq < source.visible_tail:
                sliced = await self.message_at(source, request.fork_offset.seq)
        outcome = self._create_now(request, sliced)
        await self.storage.wait_durable(outcome.stream.last_lsn)
        return outcome

    def _create_now(self, request: CreateRequest, sliced: tuple[bytes, int] | None) -> CreateOutcome:
        existing = self.find(request.name)
        if existing is not None:
            if existing.soft_deleted:
                raise Conflict(f"stream {request.name!r} was deleted and still has forks", code="STREAM_DELETED")
            source = self.by_uid.get(existing.fork_of) if existing.fork_of is not None else None
            if not forks.same_config(existing, request, source):
                raise Conflict(f"stream {request.name!r} already exists with a different configuration")
            return CreateOutcome(False, existing, existing.tail)
        located = bucket_of(request.name)
        if located is not None:
            # no implicit bucket creation, and none past the cap
            self.buckets.require_room(self.buckets.get(located[0]), self.config.max_streams_per_bucket)
        source = self._fork_source(request) if request.fork_from is not None else None
        content_type = request.content_type or (source.content_type if source else DEFAULT_CONTENT_TYPE)
        if source is not None and normalize_content_type(content_type) != normalize_content_type(source.content_type):
            raise Conflict("a fork's content type must match its source's", code="CONTENT_TYPE_MISMATCH")
        ttl_s, expires_at, expires_at_ms = forks.effective_expiry(request, source)
        fork_seq, messages, batches = 0, [], []
        if source is not None:
            fork_seq, prefix = forks.resolve_fork_point(source, request, sliced, self.earliest_readable(source))
            if prefix is not None:
                messages.append(prefix)
                batches.append(1)
        if request.body:
            initial = split_messages(request.body, allow_empty_array=True) if is_json(content_type) else [request.body]
            if initial:
                messages.extend(initial)
                batches.append(len(initial))
        header = {
            "name": request.name,
            "content_type": content_type,
            "ttl_s": ttl_s,
            "expires_at": expires_at,
            "expires_at_ms": expires_at_ms,
            "closed": request.closed,
            "fork_of": source.uid if source else None,
            "fork_seq": fork_seq,
            "fork_offset": request.fork_offset.encode() if request.fork_offset else None,
            "fork_sub_offset": request.fork_sub_offset or 0,
            "first_seq": fork_seq,
            "batches": batches,
            "ts": self.clock(),
        }
        record = self.storage.submit(RecordKind.CREATE, self.storage.next_lsn, header, tuple(messages))
        stream = self._apply_create(record)
        self.streams[stream.name] = stream
        self._publish(record.lsn, stream)
        return CreateOutcome(True, stream, stream.tail)

    def _fork_source(self, request: CreateRequest) -> Stream:
        assert request.fork_from is not None
        source = self.find(request.fork_from)
        if source is None:
            raise NotFound(f"fork source {request.fork_from!r} not found", code="STREAM_NOT_FOUND")
        if source.soft_deleted:
            raise Conflict(f"fork source {request.fork_from!r} was deleted", code="STREAM_DELETED")
        return source

    async def message_at(self, stream: Stream, seq: int) -> tuple[bytes, int]:
        """Message ``seq`` as ``stream`` sees it, and the length of the append batch it starts."""
        while seq < stream.fork_seq and stream.fork_of is not None:
            stream = self.by_uid[stream.fork_of]
        if seq >= stream.mem_base:
            return stream.messages[seq - stream.mem_base], stream.batches.get(seq, 1)
        (stored,) = await self.storage.read_messages(stream.uid, seq, seq + 1)
        return stored.data, stored.batch

    def _apply_create(self, record: Record) -> Stream:
        header = record.header
        now = header["ts"]
        stream = Stream(
            name=header["name"],
            uid=record.uid,
            content_type=header["content_type"],
            created_ms=now,
            ttl_s=header["ttl_s"],
            expires_at=header["expires_at"],
            expires_at_ms=header["expires_at_ms"],
            closed=header["closed"],
            fork_of=header["fork_of"],
            fork_seq=header["fork_seq"],
            fork_offset=header["fork_offset"],
            fork_sub_offset=header["fork_sub_offset"],
            last_access_ms=now,
            last_write_ms=now,
        )
        stream.tail = stream.visible_tail = stream.mem_base = stream.flushed_tail = header["first_seq"]
        seq = header["first_seq"]
        for size in header["batches"]:
            stream.remember(seq, record.messages[seq - header["first_seq"] : seq - header["first_seq"] + size], now)
            seq += size
        stream.tail = seq
        stream.last_lsn = record.lsn
        if stream.fork_of is not None:
            self.by_uid[stream.fork_of].forks += 1
        self.by_uid[stream.uid] = stream
        self.buckets.stream_added(stream.name)
        return stream

    # -- append / close ---------------------------------------------------------------

    async def append(self, name: str, request: AppendRequest) -> AppendOutcome:
        self.storage.check_writable()
        stream = self.get_live(name)
        self.touch(stream)
        try:
            outcome = self._append_now(stream, request)
        finally:
            await self.storage.wait_durable(stream.last_lsn)
        return outcome

    def _append_now(self, stream: Stream, request: AppendRequest) -> AppendOutcome:
        producer = request.producer
        if stream.closed:
            if producer is not None and stream.closed_by == (producer.producer_id, producer.epoch, producer.seq):
                return AppendOutcome(204, stream.tail, True, producer.epoch, producer.seq)
            if not request.body and producer is None:
                return AppendOutcome(204, stream.tail, True)
            raise Conflict("stream is closed", code="STREAM_CLOSED", headers=_closed_headers(stream))
        if (
            request.body
            and request.content_type is not None
            and normalize_content_type(request.content_type) != normalize_content_type(stream.content_type)
        ):
            raise Conflict(
                f"content type {request.content_type!r} does not match the stream's {stream.content_type!r}",
                code="CONTENT_TYPE_MISMATCH",
            )
        producer_state = None
        if producer is not None:
            decision = producers.admit(stream.producers.get(producer.producer_id), producer)
            if isinstance(decision, producers.Duplicate):
                return AppendOutcome(204, stream.tail, False, producer.epoch, decision.last_seq, include_offset=False)
            producer_state = decision
        if (
            request.stream_seq is not None
            and stream.stream_seq is not None
            and request.stream_seq.encode() <= stream.stream_seq.encode()
        ):
            raise Conflict("Stream-Seq must increase", code="SEQUENCE_REGRESSION")
        messages: list[bytes] = []
        if request.body:
            messages = (
                split_messages(request.body, allow_empty_array=False)
                if is_json(stream.content_type)
                else [request.body]
            )
        header = {
            "first_seq": stream.tail,
            "ts": self.clock(),
            "producer": [producer.producer_id, producer_state.epoch, producer_state.last_seq]
            if producer and producer_state
            else None,
            "stream_seq": request.stream_seq,
            "close": request.close,
        }
        record = self.storage.submit(RecordKind.APPEND, stream.uid, header, tuple(messages))
        self._apply_append(stream, record)
        self._publish(record.lsn, stream)
        status = 200 if producer is not None and messages else 204
        return AppendOutcome(
            status,
            stream.tail,
            stream.closed,
            producer.epoch if producer else None,
            producer.seq if producer else None,
        )

    def _apply_append(self, stream: Stream, record: Record) -> None:
        header = record.header
        stream.last_write_ms = header["ts"]
        if record.messages:
            stream.remember(header["first_seq"], record.messages, header["ts"])
            stream.tail = header["first_seq"] + len(record.messages)
        if header["producer"] is not None:
            producer_id, epoch, seq = header["producer"]
            stream.producers[producer_id] = producers.ProducerState(epoch, seq)
        if header["stream_seq"] is not None:
            stream.stream_seq = header["stream_seq"]
        if header["close"]:
            stream.closed = True
            if header["producer"] is not None:
                stream.closed_by = (header["producer"][0], header["producer"][1], header["producer"][2])
        stream.last_lsn = record.lsn

    # -- delete -----------------------------------------------------------------------

    async def delete(self, name: str) -> None:
        self.storage.check_writable()
        stream = self.get_live(name)
        self._submit_delete(stream)
        await self.storage.wait_durable(stream.last_lsn)

    def _submit_delete(self, stream: Stream) -> None:
        record = self.storage.submit(RecordKind.DELETE, stream.uid, {"ts": self.clock()})
        self._apply_delete(stream)
        stream.last_lsn = record.lsn
        stream.wake()

    def _apply_delete(self, stream: Stream) -> None:
        if stream.forks > 0:
            stream.soft_deleted = True
            self._tombstones.pop(stream.uid, None)
            if self.subscription_hooks is not None:
                self.subscription_hooks.on_removed(stream)
        else:
            self._remove(stream)

    def _remove(self, stream: Stream) -> None:
        """Forget a stream; a soft-deleted source whose last fork this was goes too."""
        self.by_uid.pop(stream.uid, None)
        if self.streams.get(stream.name) is stream:
            del self.streams[stream.name]
            self.buckets.stream_removed(stream.name)
        self._tombstones[stream.uid] = stream.to_state(written_ms=self.clock(), deleted=True)
        stream.wake()
        if self.subscription_hooks is not None:
            self.subscription_hooks.on_removed(stream)
        if stream.fork_of is not None:
            source = self.by_uid.get(stream.fork_of)
            if source is not None:
                source.forks -= 1
                if source.forks == 0 and source.soft_deleted:
                    self._remove(source)

    # -- buckets ----------------------------------------------------------------------

    async def create_bucket(self, bucket_id: str) -> Bucket:
        self.storage.check_writable()
        self.buckets.require_absent(bucket_id)
        header = {"bucket_id": bucket_id, "ts": self.clock()}
        record = self.storage.submit(RecordKind.BUCKET_CREATE, self.storage.next_lsn, header)
        bucket = self._apply_bucket_create(record)
        await self.storage.wait_durable(record.lsn)
        return bucket

    def _apply_bucket_create(self, record: Record) -> Bucket:
        bucket = Bucket(record.header["bucket_id"], record.uid, record.header["ts"])
        self.buckets.add(bucket)
        return bucket

    async def delete_bucket(self, bucket_id: str) -> None:
        self.storage.check_writable()
        bucket = self.buckets.get(bucket_id)
        for stream_id in list(bucket.stream_ids):
            self.find(f"{bucket_id}/{stream_id}")  # lets expired streams go first
        self.buckets.require_empty(bucket)
        record = self.storage.submit(RecordKind.BUCKET_DELETE, bucket.uid, {"ts": self.clock()})
        self.buckets.remove(bucket)
        self._tombstones[bucket.uid] = bucket.to_state(written_ms=self.clock(), deleted=True)
        await self.storage.wait_durable(record.lsn)

    # -- snapshots ----------------------------------------------------------------------

    async def publish_snapshot(self, name: str, seq: int, content_type: str, blob: bytes) -> Stream:
        self.storage.check_writable()
        stream = self.get_live(name)
        if seq > stream.visible_tail:
            raise Conflict("the snapshot offset is beyond the stream's tail", code="OFFSET_BEYOND_TAIL")
        if seq < stream.earliest_retained:
            raise Gone("the snapshot offset is older than the earliest retained offset", code="OFFSET_GONE")
        self.touch(stream)
        header = {"seq": seq, "content_type": content_type, "ts": self.clock()}
        record = self.storage.submit(RecordKind.SNAPSHOT, stream.uid, header, (blob,))
        self._apply_snapshot(stream, record)
        await self.storage.wait_durable(record.lsn)
        return stream

    def _apply_snapshot(self, stream: Stream, record: Record) -> None:
        stream.snapshot_seq = record.header["seq"]
        stream.snapshot_content_type = record.header["content_type"]
        stream.snapshot_data = record.messages[0]
        stream.snapshot_lsn = stream.last_lsn = record.lsn

    async def snapshot_blob(self, stream: Stream) -> bytes:
        """The latest snapshot's bytes, from memory or (once flushed) from Delta."""
        seq = stream.snapshot_seq
        assert seq is not None
        if stream.snapshot_data is not None:
            return stream.snapshot_data
        stored = await self.storage.read_snapshot(stream.uid, seq)
        if stored is None:
            raise NotFound("the snapshot's data is missing from storage", code="SNAPSHOT_NOT_FOUND")
        return stored[1]

    # -- visibility -------------------------------------------------------------------

    def _publish(self, lsn: int, stream: Stream) -> None:
        self._becoming_visible.append((lsn, stream, stream.tail, stream.closed))


def _closed_headers(stream: Stream) -> dict[str, str]:
    return {"Stream-Closed": "true", "Stream-Next-Offset": encode_seq(stream.tail)}
