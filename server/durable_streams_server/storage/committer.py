"""Durability orchestration: LSNs, group commit, the background flush into Delta.

Theory of operation
-------------------
The engine hands every state change to ``Storage.submit`` synchronously, in the order it
applied them; ``submit`` stamps the next LSN and queues the record. A request is
acknowledged only after ``wait_durable(lsn)`` returns.

``durability="wal"``: one writer task drains the queue, writes every pending frame with
one ``write`` and one ``fdatasync`` on a worker thread, then marks them all durable
(group commit: while one batch syncs, the next one accumulates). A flusher task
periodically cuts the log at the newest LSN, asks the engine for the state of every
stream the cut's records touched, and commits messages + states to Delta with the cut
LSN as the commit's application-transaction version. The WAL rotates at the cut, and
segments below it are deleted once the commit has succeeded.

``durability="delta"``: no WAL; the flusher runs continuously and a record is durable
when the Delta commit containing it succeeds (group commit at Delta's pace).

Recovery is the mirror image: newest Delta state per stream, then the WAL records after
the Delta commit's LSN, replayed by the engine in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from ..protocol.errors import ServiceUnavailable
from .compaction import CompactionConfig, CompactionReport, Compactor
from .delta_log import DeltaLog, StoredMessage
from .records import Record, RecordKind, encode
from .wal import WriteAheadLog

log = logging.getLogger("durable_streams_server.storage")

Durability = Literal["wal", "delta"]


@dataclass(frozen=True, slots=True)
class StorageConfig:
    data_dir: Path
    storage_uri: str
    storage_options: Mapping[str, str]
    durability: Durability = "wal"
    flush_interval_s: float = 1.0
    flush_bytes: int = 8 * 1024 * 1024
    compaction: CompactionConfig = field(default_factory=CompactionConfig)


class StateView(Protocol):
    """What storage needs from the engine: state snapshots and progress callbacks."""

    def snapshot_states(self, uids: set[int]) -> dict[int, dict[str, Any]]: ...

    def on_durable(self, lsn: int) -> None: ...

    def on_flushed(self, states: Mapping[int, dict[str, Any]]) -> None: ...

    def retention_plan(self) -> dict[int, int]:
        """uid -> first retained seq, for streams whose older messages nothing reads."""
        ...


@dataclass(frozen=True, slots=True)
class Recovery:
    states: dict[int, dict[str, Any]]
    records: list[Record]


class Storage:
    def __init__(self, config: StorageConfig) -> None:
        self.config = config
        self.delta = DeltaLog(config.storage_uri, config.storage_options)
        self.wal = WriteAheadLog(config.data_dir / "wal") if config.durability == "wal" else None
        self._view: StateView | None = None
        self._next_lsn = 1
        self._durable_lsn = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._waiter_ids = itertools.count()
        self._wal_buffer: list[tuple[int, bytes]] = []
        self._last_queued_lsn = 0
        self._rotate_at: int | None = None
        self._unflushed: list[Record] = []
        self._unflushed_bytes = 0
        self._wal_wakeup = asyncio.Event()
        self._flush_wakeup = asyncio.Event()
        self._failure: BaseException | None = None
        self._closing = False
        self._tasks: list[asyncio.Task[None]] = []
        self.compactor = Compactor(self.delta.uri, config.storage_options, config.compaction)
        self._removed_uids: set[int] = set()
        self._retention_done: dict[int, int] = {}
        self._compaction_lock = asyncio.Lock()

    # -- recovery ---------------------------------------------------------------------

    def recover(self) -> Recovery:
        """Read the Delta state and the WAL records after it (before serving)."""
        committed = self.delta.committed_lsn()
        states = self.delta.load_states()
        records = [record for record in self._replay_wal() if record.lsn > committed]
        last = max([committed, *(record.lsn for record in records)])
        self._next_lsn = last + 1
        self._durable_lsn = last
        self._last_queued_lsn = last
        self._unflushed = list(records)
        self._unflushed_bytes = sum(record.encoded_size() for record in records)
        if self.wal is not None:
            self.wal.start_segment(self._next_lsn)
        log.info(
            "recovered",
            extra={"delta_lsn": committed, "wal_records": len(records), "streams": len(states)},
        )
        return Recovery(states, records)

    def _replay_wal(self) -> Iterator[Record]:
        if self.wal is not None:
            yield from self.wal.replay()

    # -- lifecycle --------------------------------------------------------------------

    def attach(self, view: StateView) -> None:
        self._view = view

    async def start(self) -> None:
        if self.wal is not None:
            self._tasks.append(asyncio.create_task(self._wal_writer(), name="wal-writer"))
        self._tasks.append(asyncio.create_task(self._flusher(), name="delta-flusher"))
        if self.config.compaction.interval_s > 0:
            self._tasks.append(asyncio.create_task(self._compaction_loop(), name="delta-compaction"))

    async def close(self) -> None:
        """Stop the background tasks after a final flush of everything submitted."""
        self._closing = True
        self._wal_wakeup.set()
        self._flush_wakeup.set()
        for task in self._tasks:
            if task.get_name() == "delta-compaction":
                task.cancel()
        for task in self._tasks:
            with contextlib.suppress(Exception, asyncio.CancelledError):  # logged where it happened
                await task
        if self.wal is not None:
            if not self._unflushed and self._failure is None:
                # Everything is in Delta: leave an empty WAL behind.
                self.wal.start_segment(self._next_lsn)
                self.wal.drop_through(self._next_lsn - 1)
            self.wal.close()

    # -- the write path ---------------------------------------------------------------

    def submit(self, kind: RecordKind, uid: int, header: dict[str, Any], messages: tuple[bytes, ...] = ()) -> Record:
        """Queue a state change for durability; the caller has already applied it in memory."""
        if self._failure is not None:
            raise ServiceUnavailable(f"storage failed: {self._failure}", headers={"Retry-After": "5"})
        record = Record(self._next_lsn, kind, uid, header, messages)
        self._next_lsn += 1
        self._unflushed.append(record)
        self._unflushed_bytes += record.encoded_size()
        if self.wal is not None:
            self._wal_buffer.append((record.lsn, encode(record)))
            self._wal_wakeup.set()
            if self._unflushed_bytes >= self.config.flush_bytes:
                self._flush_wakeup.set()
        else:
            self._flush_wakeup.set()
        return record

    @property
    def next_lsn(self) -> int:
        """The LSN the next record will get; a CREATE uses it as the stream's uid."""
        return self._next_lsn

    async def wait_durable(self, lsn: int) -> None:
        if lsn <= self._durable_lsn:
            return
        if self._failure is not None:
            raise ServiceUnavailable(f"storage failed: {self._failure}", headers={"Retry-After": "5"})
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (lsn, next(self._waiter_ids), future))
        await future

    def _mark_durable(self, lsn: int) -> None:
        if lsn <= self._durable_lsn:
            return
        self._durable_lsn = lsn
        if self._view is not None:
            self._view.on_durable(lsn)
        while self._waiters and self._waiters[0][0] <= lsn:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(None)

    def _fail(self, error: BaseException) -> None:
        """Stop acknowledging: memory may now be ahead of what is durable."""
        log.critical("storage failure; refusing writes until restart", exc_info=error)
        self._failure = error
        waiters, self._waiters = self._waiters, []
        for _, _, future in waiters:
            if not future.done():
                future.set_exception(ServiceUnavailable(f"storage failed: {error}", headers={"Retry-After": "5"}))

    async def _wal_writer(self) -> None:
        assert self.wal is not None
        wal = self.wal
        while True:
            await self._wal_wakeup.wait()
            self._wal_wakeup.clear()
            while True:
                batch, self._wal_buffer = self._wal_buffer, []
                if batch:
                    self._last_queued_lsn = batch[-1][0]
                rotate_at = self._rotate_at
                rotate = rotate_at is not None and self._last_queued_lsn >= rotate_at - 1
                if not batch and not rotate:
                    break
                before = [frame for lsn, frame in batch if not rotate or lsn < (rotate_at or 0)]
                after = [frame for lsn, frame in batch if rotate and lsn >= (rotate_at or 0)]
                if rotate:
                    self._rotate_at = None
                try:
                    await asyncio.to_thread(_write_and_rotate, wal, before, rotate_at if rotate else None, after)
                except OSError as error:
                    self._fail(error)
                    return
                if batch:
                    self._mark_durable(batch[-1][0])
            if self._closing and not self._wal_buffer:
                return

    # -- the flush into Delta ---------------------------------------------------------

    async def _flusher(self) -> None:
        while True:
            if self.wal is not None and not self._closing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._flush_wakeup.wait(), timeout=self.config.flush_interval_s)
            else:
                await self._flush_wakeup.wait()
            self._flush_wakeup.clear()
            if self._unflushed and self._failure is None:
                await self._flush_once()
            if self._closing and not self._unflushed:
                return

    async def _flush_once(self) -> None:
        assert self._view is not None
        records, self._unflushed = self._unflushed, []
        self._unflushed_bytes = 0
        cut = records[-1].lsn
        states = self._view.snapshot_states({record.uid for record in records})
        if self.wal is not None:
            self._rotate_at = cut + 1
            self._wal_wakeup.set()
        started = time.perf_counter()
        delay = 0.1
        while True:
            try:
                await asyncio.to_thread(self.delta.commit, records, states, cut)
                break
            except Exception as error:  # object stores fail transiently; the flush is idempotent
                if self._closing and self.wal is not None:
                    log.error("final flush failed; the WAL keeps the records", exc_info=error)
                    return
                log.warning("delta commit failed; retrying", extra={"lsn": cut, "error": str(error)})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        log.debug(
            "flushed",
            extra={"lsn": cut, "records": len(records), "ms": round((time.perf_counter() - started) * 1000, 1)},
        )
        if self.wal is None:
            self._mark_durable(cut)
        self._removed_uids.update(uid for uid, state in states.items() if state.get("deleted"))
        self._view.on_flushed(states)
        if self.wal is not None:
            await asyncio.to_thread(self.wal.drop_through, cut)

    # -- compaction -------------------------------------------------------------------

    async def _compaction_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.compaction.interval_s)
            try:
                await self.compact()
            except Exception as error:  # the next pass retries; the table stays consistent
                log.warning("compaction pass failed", extra={"error": str(error)})

    async def compact(self) -> CompactionReport:
        """One compaction pass over what has been flushed; runs beside appends and reads."""
        assert self._view is not None
        async with self._compaction_lock:
            removed = set(self._removed_uids)
            retention = {
                uid: seq for uid, seq in self._view.retention_plan().items() if seq > self._retention_done.get(uid, 0)
            }
            report = await asyncio.to_thread(self.compactor.run_once, removed, retention, self.delta.vacuum)
            # (vacuum refreshed the writer's handle after the pass's last commit)
            self._removed_uids -= removed
            self._retention_done.update(retention)
        log.info(
            "compacted",
            extra={
                "files_before": report.files_before,
                "files_after": report.files_after,
                "purged_streams": report.purged_uids,
                "retention_purges": report.retention_purges,
                "vacuumed_files": report.vacuumed_files,
                "seconds": report.seconds,
            },
        )
        return report

    # -- history reads ----------------------------------------------------------------

    async def read_messages(self, uid: int, start_seq: int, end_seq: int) -> list[StoredMessage]:
        return await asyncio.to_thread(self.delta.read_messages, uid, start_seq, end_seq)

    async def read_snapshot(self, uid: int, seq: int) -> tuple[str, bytes] | None:
        return await asyncio.to_thread(self.delta.read_snapshot, uid, seq)


def _write_and_rotate(wal: WriteAheadLog, before: list[bytes], rotate_at: int | None, after: list[bytes]) -> None:
    if before:
        wal.write(before)
    if rotate_at is not None:
        wal.start_segment(rotate_at)
    if after:
        wal.write(after)
