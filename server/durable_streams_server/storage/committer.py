"""The ``Storage`` facade: the one object the engine and the HTTP layer hold.

It wires the package's parts together (LSNs and acknowledgements, admission, the WAL
writer, the Delta flusher, compaction) and runs their tasks; each part is its own module
and the theory of operation is in the package docstring (``storage/__init__.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa

from . import wal_binding
from .acks import Acknowledgements
from .admission import Admission
from .compaction import Compaction, CompactionConfig, CompactionReport, Compactor
from .data_dir_lock import DataDirLock
from .delta_log import DeltaLog
from .durability import Durability
from .flusher import DeltaFlusher
from .history_reader import HistoryReader, StoredMessage
from .leftover_wal import give_up, refusal, unflushed
from .message_batch import MessageBatch
from .observer import NullObserver, StorageObserver
from .owner_watch import OwnerWatch
from .ownership import Node, Owner, OwnershipError, node_id_for, wal_id_for
from .read_plans import ReadPlanner, TablePlan
from .records import H, Record, encode
from .view import Recovery, StateView
from .wal import PREALLOCATE_BYTES, WriteAheadLog
from .wal_writer import WalWriter

__all__ = ["Durability", "Recovery", "StateView", "Storage", "StorageConfig"]

log = logging.getLogger("durable_streams_server.storage")


@dataclass(frozen=True, slots=True)
class StorageConfig:
    data_dir: Path
    storage_uri: str
    storage_options: Mapping[str, str]
    durability: Durability = Durability.WAL
    flush_interval_s: float = 1.0
    flush_bytes: int = 8 * 1024 * 1024
    max_wal_bytes: int = 1024**3
    """WAL mode: beyond this many bytes of WAL (Delta unreachable or too slow), writes get 503."""
    commit_timeout_s: float = 10.0
    """Delta mode: a commit attempt without an answer for this long counts as failing."""
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    history_parked_bytes: int = 64 * 1024 * 1024
    """Memory of history reads parked between responses (``history_reader``)."""
    read_plan_ttl_s: int = 600
    """How long the file URLs of a read plan stay valid (``read_plans``)."""
    node: Node | None = None
    """This server as it claims the storage (``ownership``); ``None``: a node whose id is kept
    in ``data_dir``, refusing a location another node owns."""


class Storage:
    def __init__(self, config: StorageConfig, observer: StorageObserver | None = None) -> None:
        self.config = config
        observer = observer or NullObserver()
        self.node = config.node or Node(
            node_id_for(config.data_dir, None),
            data_dir=str(config.data_dir.resolve()),
            durability=config.durability,
            wal_id=wal_id_for(config.data_dir),
        )
        self.delta = DeltaLog(
            config.storage_uri,
            config.storage_options,
            log_retention_hours=config.compaction.log_retention_hours,
            before_create=self._before_create,
        )
        self.history = HistoryReader(
            self.delta.uri, config.storage_options, max_parked_bytes=config.history_parked_bytes
        )
        self.plans = ReadPlanner(self.delta.uri, config.storage_options, config.read_plan_ttl_s)
        self.wal = (
            WriteAheadLog(config.data_dir / "wal", min(PREALLOCATE_BYTES, config.max_wal_bytes // 16))
            if config.durability == Durability.WAL
            else None
        )
        self._acks = Acknowledgements()
        self._admission = Admission(self.wal, config.max_wal_bytes)
        self._wal_writer = WalWriter(self.wal, self._acks, self._wal_failed) if self.wal is not None else None
        self._flusher = DeltaFlusher(
            self.delta,
            self._wal_writer,
            self._acks,
            self._admission,
            observer,
            flush_interval_s=config.flush_interval_s,
            flush_bytes=config.flush_bytes,
            commit_timeout_s=config.commit_timeout_s,
        )
        self._compaction = Compaction(Compactor(self.delta, config.compaction), observer)
        self._flusher.after_flush.append(self._compaction.note_flushed)
        self._flusher.on_fenced = self._fenced
        self.owner: Owner | None = None
        """The epoch this server owns its storage under, once ``recover`` has claimed it."""
        self._data_dir_lock: DataDirLock | None = None
        self._watch = OwnerWatch(
            self.delta,
            self._admission,
            self.node.poll_interval_s,
            flush=self._flusher.flush_soon,
            flushed=lambda: self._flusher.all_flushed,
            on_fenced=self._fenced,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self.on_fenced: list[Callable[[OwnershipError], None]] = []
        """Called once this server is no longer its storage's owner, after writes are refused
        and the waiting requests answered (a cluster's shard server then stops: ``server``)."""

    # -- recovery and lifecycle -----------------------------------------------------------

    def _before_create(self, uri: str) -> None:
        """Where no table is at ``uri``: refuse to make one if the data dir's table was there, or
        if its WAL holds records: a WAL server's, and in delta mode those of a data dir that names
        no table (from before ``wal-table``: else ``recover`` refuses them, ``leftover_wal``, but
        only after the table was made) unless this start gives them up (``--take-over force``)."""
        data_dir = self.config.data_dir
        unnamed = wal_binding.bound_table(data_dir) is None and self.node.take_over != "force"
        held = unflushed(data_dir, 0) if self.config.durability == Durability.WAL or unnamed else None
        lsns = (held.first_lsn, held.last_lsn) if held is not None else (0, 0)
        wal_binding.check_creatable(data_dir, uri, held.records if held is not None else 0, lsns)

    def recover(self) -> Recovery:
        """Claim the storage (``ownership``), then read the Delta state and the WAL records after
        it (before serving). Without a WAL of its own (delta mode), a WAL left in the data dir
        holding records Delta does not hold refuses the start, unless given up (``leftover_wal``)."""
        replayed = list(self.wal.replay()) if self.wal is not None else []
        claim, data_dir, committed = uuid.uuid4().hex, self.config.data_dir, self.delta.committed_lsn()
        table, owned = self.delta.identity()
        wal_binding.check_present(data_dir, table.uri, table.id)
        ours = self.wal is None and wal_binding.wal_is_for(data_dir, table)  # (another table's stay for its start)
        leftover = unflushed(data_dir, committed) if ours else None
        if leftover is not None and self.node.take_over != "force":
            raise refusal(leftover, self.delta.uri)
        if self.wal is not None:  # (its records are for one table, and its claims on it: ``wal_binding``)
            lsns = (replayed[0].lsn, replayed[-1].lsn) if replayed else (0, 0)
            written = owned or committed > 0
            wal_binding.check(data_dir, table, len(replayed), lsns, written=written)
            wal_binding.check_follows(data_dir, table, committed, self.wal.first_lsn(), written=written)
            self.node = replace(self.node, claim=claim, claims=wal_binding.claims_on(data_dir, table))
            wal_binding.note_claim(data_dir, table, claim)  # (before the claim it names)
        self.owner = self.delta.claim(self.node, holds_wal=bool(replayed))
        if self.wal is not None:
            previous = wal_binding.bound_table(data_dir)
            if previous is not None and previous.id != table.id:  # (no records: ``check``)
                self.wal.discard_empty()
            wal_binding.bind(data_dir, table, claim)
        if leftover is not None:
            give_up(leftover)
        if self.wal is None:
            wal_binding.name(data_dir, table, wal_holds_records=unflushed(data_dir, 0) is not None)
        committed = self.delta.committed_lsn()
        rows = self.delta.load_rows()
        self._compaction.recovered(rows.states, self.delta.recovered_checkpoint)
        records = [record for record in replayed if record.lsn > committed]
        last = max([committed, *(record.lsn for record in records)])
        self._acks.recovered(last)
        self._flusher.recovered(committed, records)
        if self._wal_writer is not None:
            self._wal_writer.recovered(last)
        log.info(
            "recovered",
            extra={
                "delta_lsn": committed,
                "wal_records": len(records),
                "states_parsed": len(rows.states),
                "streams_dormant": len(rows.dormant),
                "purges_pending": self._compaction.pending_purges,
                "state_rows_read": self.delta.recovered_checkpoint[0] + self.delta.recovered_checkpoint[2],
                "commits_after_state_checkpoint": self.delta.recovered_checkpoint[1],
            },
        )
        return Recovery(rows.states, records, rows.subscriptions, rows.dormant)

    def attach(self, view: StateView) -> None:
        self._acks.on_durable = view.on_durable
        self._flusher.view = view
        self._compaction.view = view

    async def start(self) -> None:
        if self._wal_writer is not None:
            self._tasks.append(asyncio.create_task(self._wal_writer.run(), name="wal-writer"))
        self._tasks.append(asyncio.create_task(self._flusher.run(), name="delta-flusher"))
        if self.config.compaction.interval_s > 0:
            self._tasks.append(asyncio.create_task(self._compaction.loop(), name="delta-compaction"))
        if self.owner is not None:
            self._tasks.append(asyncio.create_task(self._watch.run(), name="owner-watch"))

    def hold_until_closed(self, lock: DataDirLock) -> None:
        """Release ``lock``, the data directory's (``data_dir_lock``), once ``close`` has closed the WAL."""
        self._data_dir_lock = lock

    async def close(self) -> None:
        """Stop the background tasks after a final flush of everything submitted."""
        try:
            await self._close()
        finally:
            if self._data_dir_lock is not None:
                self._data_dir_lock.release()

    async def _close(self) -> None:
        if self._wal_writer is not None:
            self._wal_writer.close()
        self._flusher.close()
        for task in self._tasks:
            if task.get_name() in ("delta-compaction", "owner-watch"):
                task.cancel()
        for task in self._tasks:
            with contextlib.suppress(Exception, asyncio.CancelledError):  # logged where it happened
                await task
        await self._compaction.close()
        if self.wal is not None:
            await asyncio.to_thread(self._close_wal, self.wal)
        if self._flusher.all_flushed and self._admission.failure is None and self._admission.fenced is None:
            try:
                await asyncio.to_thread(self.delta.release)
            except Exception as error:  # (the next owner then has to ask, unless it is this node)
                log.warning("could not release the storage", extra={"error": str(error)})
            else:
                log.info("released the storage", extra={"node_id": self.node.node_id})

    def _fenced(self, error: OwnershipError) -> None:
        """No longer the owner: refuse writes, and answer every request waiting for durability
        with that refusal instead of an acknowledgement (``owner_watch``)."""
        first = self._admission.fenced is None
        self._admission.fence(error)
        self._acks.fail_waiters(lambda: self._admission.unavailable("NOT_OWNER"))
        for then in self.on_fenced if first else ():
            then(error)

    def _close_wal(self, wal: WriteAheadLog) -> None:
        """Off the loop's thread (``sync_policy``): close the log, empty if Delta holds everything."""
        next_lsn = self._acks.next_lsn
        if self._flusher.flushed_lsn == next_lsn - 1 and self._admission.failure is None:
            wal.start_segment(next_lsn)
            wal.drop_through(next_lsn - 1)
        wal.close()

    # -- health -----------------------------------------------------------------------

    @property
    def wal_bytes(self) -> int:
        """Bytes of WAL records on disk (0 in delta mode; ``wal``: preallocation not counted)."""
        return self.wal.size_bytes() if self.wal is not None else 0

    @property
    def unflushed_bytes(self) -> int:
        """Message bytes of the records not yet committed to Delta."""
        return self._flusher.unflushed_bytes

    @property
    def stored_bytes(self) -> int:
        """Message bytes (snapshots included) of the records stored since start, replayed ones
        included: committed plus not yet committed. It only grows; its rate is the write
        throughput in bytes."""
        return self._flusher.flushed_bytes + self._flusher.unflushed_bytes

    @property
    def flush_lag_s(self) -> float:
        """Age of the oldest record not yet committed to Delta (0.0 when there is none)."""
        return self._flusher.flush_lag_s

    @property
    def degraded(self) -> str | None:
        """Why storage cannot make progress now; ``None`` when it is healthy."""
        return self._admission.degraded

    def check_writable(self) -> None:
        """Refuse a write (``ServiceUnavailable`` with ``retry_after_s``) before the engine
        validates or changes anything, while storage could not make it durable soon."""
        self._admission.check_writable()

    # -- the write path ---------------------------------------------------------------

    def submit(self, uid: int, header: H, messages: tuple[bytes, ...] | MessageBatch = ()) -> Record[H]:
        """Queue a state change for durability; the caller applies it in memory right after."""
        if self._admission.failure is not None:
            raise self._admission.unavailable("STORAGE_FAILED")
        record = Record(self._acks.stamp(), uid, header, messages)
        self._flusher.add(record)
        if self._wal_writer is not None:
            self._wal_writer.queue(record.lsn, encode(record))
        return record

    @property
    def next_lsn(self) -> int:
        """The LSN the next record will get; a CREATE uses it as the stream's uid."""
        return self._acks.next_lsn

    @property
    def flushed_lsn(self) -> int:
        return self._flusher.flushed_lsn

    async def wait_durable(self, lsn: int) -> None:
        if self._acks.is_durable(lsn):
            return
        self._admission.check_acknowledgeable()
        await self._acks.wait(lsn)

    def _wal_failed(self, error: OSError) -> None:
        self._admission.fail(error)
        self._acks.fail_waiters(lambda: self._admission.unavailable("STORAGE_FAILED"))

    async def compact(self) -> CompactionReport:
        """One compaction pass over what has been flushed; runs beside appends and reads."""
        return await self._compaction.compact()

    # -- history reads ----------------------------------------------------------------

    async def read_messages(self, uid: int, start_seq: int, end_seq: int) -> list[StoredMessage]:
        return await asyncio.to_thread(self.history.read_messages, uid, start_seq, end_seq)

    async def read_history(self, uid: int, start_seq: int, end_seq: int, max_bytes: int) -> pa.Table:
        """Whole messages from ``start_seq`` (before ``end_seq``) within ``max_bytes``, at least
        one, as Arrow columns ``seq``, ``ts``, ``data``, ``meta`` (``history_reader``)."""
        return await asyncio.to_thread(self.history.read, uid, start_seq, end_seq, max_bytes)

    async def plan_reads(self, segments: list[tuple[int, int, int]]) -> TablePlan:
        """The data files holding each segment's messages ``(uid, first, end)`` (``read_plans``)."""
        return await asyncio.to_thread(self.plans.plan, segments)

    async def first_at(self, segments: list[tuple[int, int, int]], at_us: int) -> int | None:
        """The first stored message of the segments appended at or after ``at_us`` (``time_index``)."""
        return await asyncio.to_thread(self.plans.first_at, segments, at_us)

    @property
    def history_read_bytes(self) -> int:
        """Bytes read from Delta data files by history reads since the start."""
        return self.history.bytes_read

    async def read_snapshot(self, uid: int, seq: int) -> tuple[str, bytes] | None:
        return await asyncio.to_thread(self.delta.read_snapshot, uid, seq)
