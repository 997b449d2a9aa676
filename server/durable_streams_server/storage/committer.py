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

Object-store outages
--------------------
A failed Delta commit (object_store has already retried it internally) is retried by the
flusher with backoff, forever and without giving up on the batch: the commit is
idempotent, because a retry after a failure first refreshes the table and skips the
commit when its LSN is already there (the failed attempt may have landed after all).
The batch keeps its states snapshot, so a retry writes exactly what the first attempt
would have. What the outage means for requests depends on the durability mode:

* ``wal``: nothing changes for clients while the WAL has room; records keep being
  acknowledged after their fsync and pile up in the WAL (and in memory). Once the WAL
  holds more than ``max_wal_bytes``, new writes get 503 + ``Retry-After``
  (``WAL_FULL``). When a commit succeeds again the WAL segments below it are deleted and
  writes are accepted again, without a restart.
* ``delta``: a record is acknowledged only by its commit, so the first failed attempt
  (or one without an answer for ``commit_timeout_s``: a store that hangs rather than
  refuses) answers every waiting request with 503 (``COMMIT_IN_DOUBT``): like a
  timeout, the write may or may not become durable. Its record stays applied in memory
  and queued, and does commit once the store is back (or is lost with a crash before
  that: it was never acknowledged). Readers never see it before it commits, since visibility follows
  durability. A producer retrying the same (id, epoch, seq) after the outage therefore
  meets either its committed record (duplicate: 204) or, after a restart that lost it,
  no record (accepted): exactly one copy either way. Plain appends retried by the client
  may duplicate, as after any timeout. Until a commit succeeds again, new writes are
  refused up-front (``DELTA_UNAVAILABLE``).

Refusals happen in ``check_writable``, which the engine calls before it validates or
changes anything, so a refused write leaves memory untouched. A WAL write or fsync
failure (local disk) is different: memory may be ahead of the WAL, so storage refuses
writes until a restart (``STORAGE_FAILED``), answering at once instead of hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from ..protocol.errors import ServiceUnavailable
from .compaction import CompactionConfig, CompactionReport, Compactor
from .delta_log import DeltaLog, StoredMessage
from .observer import NullObserver, StorageObserver
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
    max_wal_bytes: int = 1024**3
    """WAL mode: beyond this many bytes of WAL (Delta unreachable or too slow), writes get 503."""
    commit_timeout_s: float = 10.0
    """Delta mode: a commit attempt without an answer for this long counts as failing."""
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
    def __init__(self, config: StorageConfig, observer: StorageObserver | None = None) -> None:
        self.config = config
        self._observer: StorageObserver = observer or NullObserver()
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
        self._unflushed_since: float | None = None
        # the batch the flusher is committing (taken out of ``_unflushed``)
        self._inflight_bytes = 0
        self._inflight_since: float | None = None
        self._flushed_lsn = 0
        self._commit_error: tuple[float, str] | None = None
        """(since when, latest error) while Delta commits fail."""
        self._retry_delay = 0.0
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
        self._flushed_lsn = committed
        self._unflushed = list(records)
        self._unflushed_bytes = sum(record.encoded_size() for record in records)
        self._unflushed_since = records[0].header.get("ts", time.time() * 1000) / 1000 if records else None
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
            if self._flushed_lsn == self._next_lsn - 1 and self._failure is None:
                # Everything is in Delta: leave an empty WAL behind.
                self.wal.start_segment(self._next_lsn)
                self.wal.drop_through(self._next_lsn - 1)
            self.wal.close()

    # -- health ---------------------------------------------------------------------

    @property
    def wal_bytes(self) -> int:
        """Bytes of WAL segments on disk (0 in delta mode)."""
        return self.wal.size_bytes() if self.wal is not None else 0

    @property
    def unflushed_bytes(self) -> int:
        """Message bytes of the records not yet committed to Delta."""
        return self._unflushed_bytes + self._inflight_bytes

    @property
    def flush_lag_s(self) -> float:
        """Age of the oldest record not yet committed to Delta (0.0 when there is none)."""
        since = self._inflight_since if self._inflight_since is not None else self._unflushed_since
        return max(0.0, time.time() - since) if since is not None else 0.0

    @property
    def degraded(self) -> str | None:
        """Why storage cannot make progress now; ``None`` when it is healthy."""
        if self._failure is not None:
            return f"storage failed, writes refused until restart: {self._failure}"
        failing = None
        if self._commit_error is not None:
            since, error = self._commit_error
            failing = f"delta commits failing since {datetime.fromtimestamp(since, UTC).isoformat()}: {error}"
        if self._wal_full():
            cap = f"WAL over its {_size_text(self.config.max_wal_bytes)} cap"
            return f"{cap} ({failing})" if failing else cap
        return failing

    def _wal_full(self) -> bool:
        return self.wal is not None and self.wal.size_bytes() > self.config.max_wal_bytes

    def check_writable(self) -> None:
        """Refuse a write up-front, before the engine validates or changes anything, while
        storage could not make it durable soon. O(1): it runs on every write."""
        if self._failure is not None:
            raise self._unavailable("STORAGE_FAILED")
        if self.wal is None and self._commit_error is not None:
            raise self._unavailable("DELTA_UNAVAILABLE")
        if self._wal_full():
            raise self._unavailable("WAL_FULL")

    def _unavailable(self, code: str, message: str | None = None) -> ServiceUnavailable:
        # A fatal failure needs a restart; otherwise the next commit attempt is due in
        # about the flusher's current backoff.
        retry_after = 5 if self._failure is not None else max(1, math.ceil(self._retry_delay))
        return ServiceUnavailable(
            message or self.degraded or "storage is unavailable",
            code=code,
            headers={"Retry-After": str(retry_after)},
        )

    # -- the write path ---------------------------------------------------------------

    def submit(self, kind: RecordKind, uid: int, header: dict[str, Any], messages: tuple[bytes, ...] = ()) -> Record:
        """Queue a state change for durability; the caller applies it in memory right after."""
        if self._failure is not None:
            raise self._unavailable("STORAGE_FAILED")
        record = Record(self._next_lsn, kind, uid, header, messages)
        self._next_lsn += 1
        if not self._unflushed:
            self._unflushed_since = time.time()
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
            raise self._unavailable("STORAGE_FAILED")
        if self.wal is None and self._commit_error is not None:
            raise self._unavailable("COMMIT_IN_DOUBT", _IN_DOUBT)
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
        self._fail_waiters("STORAGE_FAILED")

    def _fail_waiters(self, code: str, message: str | None = None) -> None:
        waiters, self._waiters = self._waiters, []
        for _, _, future in waiters:
            if not future.done():
                future.set_exception(self._unavailable(code, message))

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
            elif not self._closing:
                await self._flush_wakeup.wait()
            self._flush_wakeup.clear()
            if self._unflushed and self._failure is None and not await self._flush_once():
                return  # closing, and Delta is unreachable
            if self._closing and (not self._unflushed or self._failure is not None):
                return  # (after a WAL failure, the next start recovers what the WAL holds)

    async def _flush_once(self) -> bool:
        """Commit everything submitted so far; ``False`` if given up (closing during an outage)."""
        assert self._view is not None
        records, self._unflushed = self._unflushed, []
        self._inflight_bytes, self._unflushed_bytes = self._unflushed_bytes, 0
        self._inflight_since, self._unflushed_since = self._unflushed_since, None
        cut = records[-1].lsn
        states = self._view.snapshot_states({record.uid for record in records})
        if self.wal is not None:
            self._rotate_at = cut + 1
            self._wal_wakeup.set()
        started = time.perf_counter()
        self._retry_delay = 0.1
        while not await self._commit(records, states, cut, in_doubt=self._commit_error is not None):
            if self._closing:
                log.error(
                    "final flush failed; "
                    + ("the WAL keeps the records" if self.wal is not None else "unacknowledged records dropped"),
                    extra={"lsn": cut},
                )
                return False
            await asyncio.sleep(self._retry_delay)
            self._retry_delay = min(self._retry_delay * 2, 5.0)
        self._retry_delay = 0.0
        log.debug(
            "flushed",
            extra={"lsn": cut, "records": len(records), "ms": round((time.perf_counter() - started) * 1000, 1)},
        )
        self._flushed_lsn = cut
        self._inflight_bytes, self._inflight_since = 0, None
        if self.wal is None:
            self._mark_durable(cut)
        self._removed_uids.update(uid for uid, state in states.items() if state.get("deleted"))
        self._view.on_flushed(states)
        if self.wal is not None:
            await asyncio.to_thread(self.wal.drop_through, cut)
        return True

    async def _commit(
        self, records: list[Record], states: Mapping[int, dict[str, Any]], cut: int, in_doubt: bool
    ) -> bool:
        """One commit attempt. After a failure the last attempt may have landed anyway
        (the error can come after the log entry was written), so look before committing.

        In delta mode requests wait for the attempt, and an object store that does not
        answer (rather than refusing) can keep it busy for minutes of client-side
        retries: after ``commit_timeout_s`` it counts as failing (503s) until it ends."""
        started = time.perf_counter()
        attempt = asyncio.ensure_future(asyncio.to_thread(self._commit_blocking, records, states, cut, in_doubt))
        if self.wal is None:
            done, _ = await asyncio.wait({attempt}, timeout=self.config.commit_timeout_s)
            if not done:
                self._commit_failed(TimeoutError(f"no answer within {self.config.commit_timeout_s:g} s"), cut)
        try:
            await attempt
        except Exception as error:  # object stores fail transiently; the flush is idempotent
            self._observer.delta_commit(time.perf_counter() - started, False)
            self._commit_failed(error, cut)
            return False
        self._observer.delta_commit(time.perf_counter() - started, True)
        if self._commit_error is not None:
            since = datetime.fromtimestamp(self._commit_error[0], UTC).isoformat()
            log.warning("delta commits succeed again", extra={"lsn": cut, "failing_since": since})
            self._commit_error = None
        return True

    def _commit_blocking(
        self, records: list[Record], states: Mapping[int, dict[str, Any]], cut: int, in_doubt: bool
    ) -> None:
        if not in_doubt or self.delta.refreshed_lsn() < cut:
            self.delta.commit(records, states, cut)

    def _commit_failed(self, error: Exception, cut: int) -> None:
        if self._commit_error is None:
            log.error("delta commit failed; retrying until it succeeds", extra={"lsn": cut, "error": str(error)})
            self._commit_error = (time.time(), str(error))
        else:
            log.warning("delta commit failed again", extra={"lsn": cut, "error": str(error)})
            self._commit_error = (self._commit_error[0], str(error))
        if self.wal is None:
            self._fail_waiters("COMMIT_IN_DOUBT", _IN_DOUBT)

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
            started = time.perf_counter()
            try:
                report = await asyncio.to_thread(self.compactor.run_once, removed, retention, self.delta.vacuum)
            except Exception:
                self._observer.compaction(time.perf_counter() - started, False)
                raise
            self._observer.compaction(time.perf_counter() - started, True)
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


_IN_DOUBT = (
    "the Delta commit of this write failed; it stays queued and may still become durable "
    "(an idempotent producer can safely retry the same request)"
)


def _size_text(size: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor:
            return f"{size / factor:g} {unit}"
    return f"{size} bytes"


def _write_and_rotate(wal: WriteAheadLog, before: list[bytes], rotate_at: int | None, after: list[bytes]) -> None:
    if before:
        wal.write(before)
    if rotate_at is not None:
        wal.start_segment(rotate_at)
    if after:
        wal.write(after)
