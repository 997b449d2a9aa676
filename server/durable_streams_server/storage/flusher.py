"""The Delta flusher: submitted records into Delta commits, and riding out store outages.

The flusher periodically (``flush_interval_s``, or at once when ``flush_bytes`` are
pending) cuts the queue at the newest LSN, asks the engine (``StateView``) for the state
of every stream the cut's records touched, and commits messages + states to Delta with
the cut LSN as the commit's application-transaction version. In WAL mode it then asks
the WAL writer to rotate at the cut, and deletes the segments below it once the commit
has succeeded. In delta mode there is no WAL: the flusher runs whenever something is
queued, and a record is durable (acknowledged) when the commit containing it succeeds.

Object-store outages
--------------------
A failed Delta commit (object_store has already retried it internally) is retried with
backoff, forever and without giving up on the batch: the commit is idempotent, because
a retry after a failure first refreshes the table and skips the commit when its LSN is
already there (the failed attempt may have landed after all). "Already there" means a
commit of this owner's epoch (``DeltaLog.landed``): the refreshed snapshot naming a newer
owner fences this server first, since a new owner continues the LSNs from Delta and its
commits may pass the cut of a batch that never landed; such a batch is never marked
durable, shown to readers or acknowledged. A retry also stops before it starts once this
server is fenced (``owner_watch`` may notice while the flusher waits to retry). The batch
keeps its states snapshot, so a retry writes exactly what the first attempt would have. While
commits fail, ``Admission`` knows (``commit_failed``) and refuses what it must; in
delta mode every waiting request is answered at once with 503 ``COMMIT_IN_DOUBT`` (see
``storage`` for what that means to clients). An attempt without an answer for
``commit_timeout_s`` counts as failing too (a store that hangs rather than refuses).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping

from .acks import Acknowledgements
from .admission import IN_DOUBT, Admission
from .delta_log import DeltaLog
from .observer import StorageObserver
from .ownership import OwnershipError
from .records import Header, Record
from .view import StateView, StreamState
from .wal_writer import WalWriter

log = logging.getLogger("durable_streams_server.storage")

_FIRST_RETRY_S = 0.1
_MAX_RETRY_S = 5.0


class DeltaFlusher:
    def __init__(
        self,
        delta: DeltaLog,
        wal_writer: WalWriter | None,
        acks: Acknowledgements,
        admission: Admission,
        observer: StorageObserver,
        *,
        flush_interval_s: float,
        flush_bytes: int,
        commit_timeout_s: float,
    ) -> None:
        self._delta = delta
        self._wal_writer = wal_writer
        self._acks = acks
        self._admission = admission
        self._observer = observer
        self._flush_interval_s = flush_interval_s
        self._flush_bytes = flush_bytes
        self._commit_timeout_s = commit_timeout_s
        self.view: StateView | None = None
        self.after_flush: list[Callable[[Mapping[int, StreamState]], None]] = []
        """Called with the flushed states after each successful commit."""
        self.on_fenced: Callable[[OwnershipError], None] = admission.fence
        """Called when a commit is refused because a newer owner claimed the table."""
        self.flushed_lsn = 0
        self.flushed_bytes = 0
        """Message bytes of the records committed since start: counted once per commit (never per
        record), so that with ``unflushed_bytes`` it gives the bytes stored since start."""
        self._unflushed: list[Record[Header]] = []
        self._unflushed_bytes = 0
        self._unflushed_since: float | None = None
        # the batch being committed (taken out of ``_unflushed``)
        self._inflight_bytes = 0
        self._inflight_since: float | None = None
        self._wakeup = asyncio.Event()
        self._closing = False

    def recovered(self, committed_lsn: int, records: list[Record[Header]]) -> None:
        """Delta holds everything up to ``committed_lsn``; ``records`` (from the WAL) not yet."""
        self.flushed_lsn = committed_lsn
        self._unflushed = list(records)
        self._unflushed_bytes = sum(record.encoded_size() for record in records)
        self._unflushed_since = records[0].header.ts / 1000 if records else None

    def add(self, record: Record[Header]) -> None:
        """Queue a submitted record for the next commit."""
        if not self._unflushed:
            self._unflushed_since = time.time()
        self._unflushed.append(record)
        self._unflushed_bytes += record.encoded_size()
        if self._wal_writer is None or self._unflushed_bytes >= self._flush_bytes:
            self._wakeup.set()

    def flush_soon(self) -> None:
        """Commit what is queued now rather than at the next interval."""
        self._wakeup.set()

    @property
    def all_flushed(self) -> bool:
        """Whether every record submitted so far is in Delta."""
        return not self._unflushed and self._inflight_since is None

    def close(self) -> None:
        """Let ``run`` return after a final flush of everything queued."""
        self._closing = True
        self._wakeup.set()

    @property
    def unflushed_bytes(self) -> int:
        return self._unflushed_bytes + self._inflight_bytes

    @property
    def flush_lag_s(self) -> float:
        since = self._inflight_since if self._inflight_since is not None else self._unflushed_since
        return max(0.0, time.time() - since) if since is not None else 0.0

    async def run(self) -> None:
        while True:
            if self._wal_writer is not None and not self._closing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout=self._flush_interval_s)
            elif not self._closing:
                await self._wakeup.wait()
            self._wakeup.clear()
            failed = self._admission.failure is not None or self._admission.fenced is not None
            if self._unflushed and not failed and not await self._flush_once():
                return  # closing, and Delta is unreachable; or fenced
            if self._closing and (not self._unflushed or failed):
                return  # (after a WAL failure, the next start recovers what the WAL holds)

    async def _flush_once(self) -> bool:
        """Commit everything submitted so far; ``False`` if given up (closing during an outage)."""
        assert self.view is not None
        records, self._unflushed = self._unflushed, []
        self._inflight_bytes, self._unflushed_bytes = self._unflushed_bytes, 0
        self._inflight_since, self._unflushed_since = self._unflushed_since, None
        cut = records[-1].lsn
        states = self.view.snapshot_states({record.uid for record in records})
        if self._wal_writer is not None:
            self._wal_writer.rotate_at(cut + 1)
        started = time.perf_counter()
        admission = self._admission
        admission.retry_delay = _FIRST_RETRY_S
        while True:
            if admission.fenced is not None:  # (before every attempt: it may come while waiting to retry)
                log.critical(
                    "records not flushed: a newer owner fenced this server",
                    extra={"lsn_from": records[0].lsn, "lsn_to": cut, "in_wal": self._wal_writer is not None},
                )
                return False
            if await self._commit(records, states, cut, in_doubt=admission.commit_error is not None):
                break
            if self._closing:
                log.error(
                    "final flush failed; "
                    + ("the WAL keeps the records" if self._wal_writer else "unacknowledged records dropped"),
                    extra={"lsn": cut},
                )
                return False
            await asyncio.sleep(admission.retry_delay)
            admission.retry_delay = min(admission.retry_delay * 2, _MAX_RETRY_S)
        admission.retry_delay = 0.0
        log.debug(
            "flushed",
            extra={"lsn": cut, "records": len(records), "ms": round((time.perf_counter() - started) * 1000, 1)},
        )
        self.flushed_lsn = cut
        self.flushed_bytes += self._inflight_bytes
        self._inflight_bytes, self._inflight_since = 0, None
        if self._wal_writer is None:
            self._acks.mark_durable(cut)
        for callback in self.after_flush:
            callback(states)
        self.view.on_flushed(states)
        if self._wal_writer is not None:
            await asyncio.to_thread(self._wal_writer.wal.drop_through, cut)
        return True

    async def _commit(
        self, records: list[Record[Header]], states: Mapping[int, StreamState], cut: int, in_doubt: bool
    ) -> bool:
        """One commit attempt. After a failure the last attempt may have landed anyway
        (the error can come after the log entry was written), so look before committing:
        for a commit of this owner's epoch (``DeltaLog.landed``; a newer owner fences).

        In delta mode requests wait for the attempt, and an object store that does not
        answer (rather than refusing) can keep it busy for minutes of client-side
        retries: after ``commit_timeout_s`` it counts as failing (503s) until it ends."""
        started = time.perf_counter()
        attempt = asyncio.ensure_future(asyncio.to_thread(self._commit_blocking, records, states, cut, in_doubt))
        if self._wal_writer is None:
            done, _ = await asyncio.wait({attempt}, timeout=self._commit_timeout_s)
            if not done:
                self._commit_failed(TimeoutError(f"no answer within {self._commit_timeout_s:g} s"), cut)
        try:
            await attempt
        except OwnershipError as error:
            self.on_fenced(error)
            return False
        except Exception as error:  # object stores fail transiently; the flush is idempotent
            self._observer.delta_commit(time.perf_counter() - started, False)
            self._commit_failed(error, cut)
            return False
        self._observer.delta_commit(time.perf_counter() - started, True)
        self._admission.commit_succeeded(cut)
        return True

    def _commit_blocking(
        self, records: list[Record[Header]], states: Mapping[int, StreamState], cut: int, in_doubt: bool
    ) -> None:
        if not in_doubt or not self._delta.landed(cut):
            self._delta.commit(records, states, cut)

    def _commit_failed(self, error: Exception, cut: int) -> None:
        self._admission.commit_failed(error, cut)
        if self._wal_writer is None:
            self._acks.fail_waiters(lambda: self._admission.unavailable("COMMIT_IN_DOUBT", IN_DOUBT))
