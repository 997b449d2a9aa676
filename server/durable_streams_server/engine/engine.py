"""The engine: what requests do to live state (validate, record, apply, await durability).

Theory of operation
-------------------
All mutations run on the event loop. Each one validates the request against the
*applied* state, builds the record that describes the change, hands it to
``Storage.submit`` and applies it to memory — all in one synchronous step with no
``await`` in between. That step is the per-stream (and per-producer) serialization the
protocol requires, for free. Only then does the request await durability of the
stream's newest record, so every answer (including duplicates and conflicts, which
depend on state that may still be in flight) reflects durable state. Before any of it,
``storage.check_writable()`` refuses writes storage could not make durable soon
(object-store outage, full WAL), so a refused write changes nothing.

Applying a record goes through ``transitions.LiveState``, the state machine recovery
replays the WAL through too, so a replayed server is indistinguishable from the one
that crashed. The engine talks to storage only through ``ports.StoragePort``.

Readers see ``visible_tail``: storage calls ``on_durable`` after each group commit and
the engine publishes the tails those records produced, waking long-poll and SSE waiters
(``visibility``). A plain append to a sleeping stream is validated against its state and
stored without building its ``Stream`` (``cold_appends``).

Deletion follows the fork rules: a stream with live forks is soft-deleted (its data
stays readable through the forks, its URL answers 410); removing the last fork of a
soft-deleted stream removes that stream too, recursively (``transitions``). TTL expiry
is checked lazily on access and behaves like a delete.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field

import pyarrow.compute as pc

from ..protocol.errors import Conflict, Gone, NotFound
from ..protocol.retention import RetentionPolicy
from ..storage.records import (
    AppendHeader,
    BucketCreateHeader,
    BucketDeleteHeader,
    DeleteHeader,
)
from ..storage.view import Recovery, StreamState
from . import forks
from .appending import admit_append
from .buckets import Bucket, Buckets, bucket_of
from .cold_appends import ColdAppends
from .consumers import Consumers
from .copied_forks import ForkCopy, PendingUnlinks
from .creation import create_record
from .history import HistoryCache, ReadAhead
from .idle import IDLE_MS, IdleStreams, most_built
from .memory import MemoryBudget
from .memory_guard import MemoryGuard
from .name_snapshots import NameSnapshot
from .ports import StoragePort
from .reserved_records import ReservedRecords
from .retention import Retention
from .snapshots import Snapshots
from .stream import Stream
from .tail_caches import TailCaches
from .tombstones import DEFAULT_MAX_COUNT, DEFAULT_RETENTION_MS, Tombstones
from .transitions import LiveState
from .types import AppendOutcome, AppendRequest, AppendResult, CreateOutcome, CreateRequest
from .visibility import Visibility

log = logging.getLogger("durable_streams_server.engine")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    tail_cache_bytes: int = 4 * 1024 * 1024
    """Flushed bytes kept in memory per stream, at most (the memory budget may keep fewer)."""
    history_cache_bytes: int = 64 * 1024 * 1024
    """History read from Delta kept for a repeated read of the same place (``history``); 0: off."""
    memory_budget_bytes: int = 512 * 1024 * 1024
    """Tail caches + history cache + in-flight reads together (``memory``); 0: no limit."""
    rss_budget_bytes: int = 0
    """Resident bytes above the process's size at start that ``memory_guard`` keeps to by
    shrinking the caches' limit; 0: no guard."""
    max_streams_per_bucket: int = 0
    """0: no limit."""
    idle_stream_ms: int = IDLE_MS
    """A stream unused this long may go back to sleep (``idle``); 0: never."""
    tombstone_retention_ms: int = DEFAULT_RETENTION_MS
    """A deleted stream's final offset and incarnation are kept this long (``tombstones``)."""
    max_tombstones: int = DEFAULT_MAX_COUNT
    default_retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    """The retention limits of a new stream that neither it nor its bucket names (``retention``)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class Engine:
    def __init__(
        self, storage: StoragePort, config: EngineConfig | None = None, clock: Callable[[], int] = _now_ms
    ) -> None:
        self.storage = storage
        self.config = config or EngineConfig()
        self.clock = clock
        self.live = LiveState(clock)
        self.visibility = Visibility(self.live)
        self.memory = MemoryBudget(self.config.memory_budget_bytes)
        self.history = HistoryCache(self.config.history_cache_bytes, self.memory)
        self.read_ahead = ReadAhead(storage, self.history)
        self.guard = MemoryGuard(self.memory, self.config.rss_budget_bytes)
        self.tails = TailCaches(self.memory, self.live.index, self.config.tail_cache_bytes)
        self.idle = IdleStreams(
            self.live.index,
            self.tails,
            clock,
            self.config.idle_stream_ms,
            flushed_lsn=lambda: storage.flushed_lsn,
            most_built=most_built(self.config.memory_budget_bytes),
        )
        self.reserved = ReservedRecords(storage, self.live.apply, clock)
        self.tombstones = Tombstones(
            self.reserved, clock, self.config.tombstone_retention_ms, self.config.max_tombstones
        )
        self.consumers = Consumers(self, self.live.index)
        self.unlinks = PendingUnlinks(self.reserved)  # (copied forks' links to remove: ``copied_forks``)
        self.retention = Retention(
            storage, self.live, clock, self.config.default_retention, self.get_live, self.earliest_readable
        )
        self.snapshots = Snapshots(storage, self.live, self.get_live, self.touch, clock)
        self.cold_appends = ColdAppends(self.live.index, storage, clock)
        storage.attach(self)

    @property
    def streams(self) -> MutableMapping[str, Stream]:
        """Every stream by name (soft-deleted ones included; a lookup builds a dormant one:
        ``stream_index``)."""
        return self.live.streams

    @property
    def by_uid(self) -> MutableMapping[int, Stream]:
        return self.live.by_uid

    def stream_names(self, prefixes: Iterable[str]) -> list[str]:
        """The names of the streams starting with any of ``prefixes``, building none: Arrow's kernels
        filter every name, only the kept ones become Python strings."""
        wanted = set(prefixes)
        if not wanted:
            return []
        names = self.live.index.name_column()
        if "" in wanted:
            return names.to_pylist()  # type: ignore[no-any-return]
        masks = [pc.starts_with(names, prefix) for prefix in wanted]
        mask = masks[0]
        for each in masks[1:]:
            mask = pc.or_(mask, each)
        return names.filter(mask).to_pylist()  # type: ignore[no-any-return]

    def live_streams_under(
        self, root: str, prefixes: Iterable[str], wanted: Callable[[str], bool]
    ) -> list[tuple[str, int, int]]:
        """The live streams named ``root`` + a path starting with one of ``prefixes`` that ``wanted``
        accepts: (path, visible tail, created_ms), building none (``stream_facts``)."""
        found = []
        for name in self.stream_names(root + prefix for prefix in prefixes):
            path = name[len(root) :]
            if wanted(path):
                facts = self.live.index.facts(name)
                if facts is not None and facts.live:
                    found.append((path, facts.tail, facts.created_ms))
        return found

    def live_tail(self, name: str) -> int | None:
        """The visible tail of the live stream at ``name``, building none (``StreamIndex.live_tail``)."""
        return self.live.index.live_tail(name)

    def name_snapshot(self) -> NameSnapshot:
        """Every stream's name as of now, for a walk on another thread (``NameSnapshot.column``)."""
        return self.live.index.name_snapshot()

    @property
    def buckets(self) -> Buckets:
        return self.live.buckets

    # -- recovery ---------------------------------------------------------------------

    def load(self, recovery: Recovery) -> None:
        self.live.load(recovery)
        reserved = self.live.subscriptions.take_reserved()
        self.tombstones.load(reserved)
        self.consumers.load(reserved)
        self.unlinks.load(reserved)

    # -- StateView (called by storage) ------------------------------------------------

    def snapshot_states(self, uids: set[int]) -> dict[int, StreamState]:
        return self.live.states_for(uids)

    def on_durable(self, lsn: int) -> None:
        self.visibility.on_durable(lsn)

    def on_flushed(self, states: Mapping[int, StreamState]) -> None:
        index = self.live.index
        for uid, state in states.items():
            stream = index.built(uid)
            if stream is None:  # (asleep, or gone: a sleeping stream's unflushed messages are its ``ColdTail``'s)
                flushed = index.cold_tails.flushed(uid, state)
                if flushed:
                    self.tails.asleep.extend(uid, flushed)
                continue
            if stream.retention is not None:
                stream.retention.note_flushed(state)
            self.tails.flushed(stream, state["tail"])
            if stream.snapshot_lsn == state.get("snapshot_lsn"):
                stream.snapshot_data = None  # in Delta now
        self.tails.asleep.settle()

    def earliest_readable(self, stream: Stream) -> int:
        """Reads below this answer 410: the stream's own retention point (``Stream.earliest_retained``),
        or below its fork point whatever its ancestry no longer retains."""
        earliest = stream.earliest_retained
        if stream.fork_of is not None and stream.fork_of in self.by_uid:
            earliest = max(earliest, min(stream.fork_seq, self.earliest_readable(self.by_uid[stream.fork_of])))
        return earliest

    def retention_plan(self) -> dict[int, int]:
        return self.retention.plan()

    async def advance_retention(self) -> None:
        await self.retention.advance()

    # -- lookups ----------------------------------------------------------------------

    def find(self, name: str) -> Stream | None:
        """The stream at ``name`` (soft-deleted ones included), expiring it if due."""
        stream = self.streams.get(name)
        if stream is not None and not stream.soft_deleted and stream.expired(self.clock()):
            self.submit_delete(stream)
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
        """Reads and writes renew a sliding TTL (HEAD does not), and keep the stream's tail
        cache from being the next one the memory budget lets go."""
        stream.last_access_ms = self.clock()
        self.tails.touch(stream.uid)

    # -- create -----------------------------------------------------------------------

    async def create(self, request: CreateRequest, copy: ForkCopy | None = None) -> CreateOutcome:
        self.storage.check_writable()
        sliced = await self.fork_message(request) if copy is None and request.fork_sub_offset else None
        outcome = self._create_now(request, sliced, copy)
        await self.storage.wait_durable(outcome.stream.last_lsn)
        return outcome

    async def fork_message(self, request: CreateRequest) -> tuple[bytes, int] | None:
        """The message a fork's sub-offset slices as its source sees it, and the length of the append
        batch it starts (``None``: it asks for none). History is immutable, so it is fetched before
        the synchronous step without racing any writer."""
        stream = self.find(request.fork_from) if request.fork_from is not None else None
        offset = request.fork_offset
        if stream is None or not request.fork_sub_offset or offset is None or offset.seq >= stream.visible_tail:
            return None
        seq = offset.seq
        while seq < stream.fork_seq and stream.fork_of is not None:
            stream = self.by_uid[stream.fork_of]
        if seq >= stream.mem_base:
            return stream.mem.get(seq), stream.batches.get(seq, 1)
        (stored,) = await self.storage.read_messages(stream.uid, seq, seq + 1)
        return stored.data, stored.batch

    def _create_now(
        self, request: CreateRequest, sliced: tuple[bytes, int] | None, copy: ForkCopy | None = None
    ) -> CreateOutcome:
        existing = self.find(request.name)
        if existing is not None:
            if existing.soft_deleted:
                raise Conflict(f"stream {request.name!r} was deleted and still has forks", code="STREAM_DELETED")
            differences = forks.config_differences(existing, request, forks.recorded_source(existing, self.by_uid))
            if differences:
                raise Conflict(
                    f"stream {request.name!r} already exists with a different configuration: {'; '.join(differences)}"
                )
            return CreateOutcome(False, existing, existing.tail)
        located = bucket_of(request.name)
        if located is not None:
            # no implicit bucket creation, and none past the cap
            self.buckets.require_room(self.buckets.get(located[0]), self.config.max_streams_per_bucket)
        source = self.fork_source(request) if request.fork_from is not None and copy is None else None
        bucket = self.buckets.by_id.get(located[0]) if located is not None else None
        header, messages = create_record(
            request,
            source=source,
            copy=copy,
            sliced=sliced,
            source_earliest=self.earliest_readable(source) if source is not None else 0,
            retention=self.retention.policy_for(request.retention, bucket),
            ts=self.clock(),
        )
        record = self.storage.submit(self.storage.next_lsn, header, messages)
        stream = self.live.create(record)
        self.visibility.publish(record.lsn, stream)
        return CreateOutcome(True, stream, stream.tail)

    def fork_source(self, request: CreateRequest) -> Stream:
        assert request.fork_from is not None
        source = self.find(request.fork_from)
        if source is None:
            raise NotFound(f"fork source {request.fork_from!r} not found", code="STREAM_NOT_FOUND")
        if source.soft_deleted:
            raise Conflict(f"fork source {request.fork_from!r} was deleted", code="STREAM_DELETED")
        return source

    # -- append / close ---------------------------------------------------------------

    async def append(self, name: str, request: AppendRequest) -> AppendOutcome:
        self.storage.check_writable()
        asleep = self.cold_appends.append(name, request)  # (a plain append to a sleeping stream)
        if asleep is not None:
            outcome, cold, lsn = asleep
            self.visibility.publish_asleep(lsn, cold)
            await self.storage.wait_durable(lsn)
            return outcome
        stream = self.get_live(name)
        self.touch(stream)
        try:
            outcome = self._append_now(stream, request)
        finally:
            await self.storage.wait_durable(stream.last_lsn)
        return outcome

    def _append_now(self, stream: Stream, request: AppendRequest) -> AppendOutcome:
        admitted = admit_append(stream, request)
        if isinstance(admitted, AppendOutcome):
            return admitted
        producer, producer_state, messages = request.producer, admitted.producer, admitted.messages
        header = AppendHeader(
            first_seq=stream.tail,
            ts=self.clock(),
            producer=(producer.producer_id, producer_state.epoch, producer_state.last_seq)
            if producer and producer_state
            else None,
            stream_seq=request.stream_seq,
            close=request.close,
        )
        record = self.storage.submit(stream.uid, header, messages)
        self.live.append(stream, record)
        self.visibility.publish(record.lsn, stream)
        return AppendOutcome(
            AppendResult.STORED_FOR_PRODUCER if producer is not None and messages else AppendResult.STORED,
            stream.tail,
            stream.closed,
            producer.epoch if producer else None,
            producer.seq if producer else None,
        )

    # -- delete -----------------------------------------------------------------------

    async def delete(self, name: str) -> None:
        self.storage.check_writable()
        stream = self.get_live(name)
        self.submit_delete(stream)
        await self.storage.wait_durable(max(stream.last_lsn, self.tombstones.last_lsn))

    def submit_delete(self, stream: Stream) -> None:
        """Delete ``stream`` (soft if it has forks), and remove what its removal takes with it."""
        record = self.storage.submit(stream.uid, DeleteHeader(ts=self.clock()))
        ancestry = [stream]  # a removal may take soft-deleted sources with it
        while ancestry[-1].fork_of is not None and ancestry[-1].fork_of in self.by_uid:
            ancestry.append(self.by_uid[ancestry[-1].fork_of])
        self.live.delete(stream, record)
        for each in ancestry:
            if each.uid not in self.by_uid:
                self.tails.drop(each.uid)
                self.unlinks.removed(each)  # (before the tombstone: ``delete`` awaits the tombstone's LSN)
                self.tombstones.record(each, record.header.ts)

    # -- buckets ----------------------------------------------------------------------

    async def create_bucket(self, bucket_id: str, retention: Mapping[str, int | None] | None = None) -> Bucket:
        self.storage.check_writable()
        self.buckets.require_absent(bucket_id)
        header = BucketCreateHeader(bucket_id=bucket_id, ts=self.clock(), retention=retention or None)
        record = self.storage.submit(self.storage.next_lsn, header)
        bucket = self.live.create_bucket(record)
        await self.storage.wait_durable(record.lsn)
        return bucket

    async def delete_bucket(self, bucket_id: str) -> None:
        self.storage.check_writable()
        bucket = self.buckets.get(bucket_id)
        for stream_id in list(bucket.stream_ids):
            self.find(f"{bucket_id}/{stream_id}")  # lets expired streams go first
        self.buckets.require_empty(bucket)
        record = self.storage.submit(bucket.uid, BucketDeleteHeader(ts=self.clock()))
        self.live.delete_bucket(bucket, record)
        await self.storage.wait_durable(record.lsn)
