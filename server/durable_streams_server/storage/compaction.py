"""Background maintenance of the Delta table: purge, cluster, checkpoint, vacuum.

One pass, each step its own atomic Delta commit (or an idempotent file operation), so a
``kill -9`` at any moment leaves a consistent table and the next pass simply redoes what
is left:

1. **purge**: delete every row of streams and buckets that were removed, and the messages
   below a snapshot's retention point of streams that no fork still reads;
2. **cluster**: rewrite the table Z-ordered by ``stream_uid`` into files of about
   ``target_file_bytes``, so each stream's rows sit in few files and reads skip the rest
   by their min/max statistics; this also merges the small files every flush leaves;
3. **checkpoint** the log and clean up old log entries;
4. **vacuum** data files that no version newer than ``vacuum_retention_hours`` uses.

Steps 1-3 work on the compactor's own ``DeltaTable`` handle and never take the flusher's
lock: appends keep committing while they run (Delta resolves an append against a
concurrent optimize or delete without conflict), and its own commits are retried on
conflict. Vacuum is different: it deletes every file the handle's snapshot does not
reference, so a file committed by the flusher a moment earlier would look unreferenced.
It therefore runs through the flusher's handle, under its lock, after a refresh
(``vacuum`` callback).

``Compaction`` schedules the passes (every ``interval_s``, or on demand through
``Storage.compact``) on a worker thread, one at a time. It learns what to purge from
the flusher (streams whose deleted state reached Delta) and from the engine's retention
plan, and forgets either only after a pass that covered it succeeded: a failed pass
(e.g. during an object-store outage) leaves everything for the next one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from .observer import StorageObserver
from .view import StateView, StreamState

log = logging.getLogger("durable_streams_server.compaction")
_storage_log = logging.getLogger("durable_streams_server.storage")

_T = TypeVar("_T")
_DELETE_BATCH = 200
_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    interval_s: float = 600.0
    target_file_bytes: int = 128 * 1024 * 1024
    vacuum_retention_hours: int = 1


@dataclass
class CompactionReport:
    files_before: int = 0
    files_after: int = 0
    purged_uids: int = 0
    retention_purges: int = 0
    vacuumed_files: int = 0
    seconds: float = 0.0


class Compactor:
    def __init__(self, uri: str, storage_options: Mapping[str, str], config: CompactionConfig) -> None:
        self.uri = uri
        self.storage_options = dict(storage_options)
        self.config = config

    def run_once(
        self, removed_uids: Iterable[int], retention: Mapping[int, int], vacuum: Callable[[int], int]
    ) -> CompactionReport:
        """One maintenance pass (blocking). ``retention`` maps uid -> first retained seq;
        ``vacuum(retention_hours)`` vacuums through the writer's handle (see above)."""
        started = time.perf_counter()
        table = DeltaTable(self.uri, storage_options=self.storage_options)
        report = CompactionReport(files_before=len(table.file_uris()))
        uids = sorted(set(removed_uids))
        for uid_batch in _batches(uids):
            self._commit(table, f"stream_uid IN ({', '.join(map(str, uid_batch))})")
        report.purged_uids = len(uids)
        below = sorted(retention.items())
        for range_batch in _batches(below):
            clauses = " OR ".join(f"(stream_uid = {uid} AND seq < {seq})" for uid, seq in range_batch)
            self._commit(table, f"kind = 'message' AND ({clauses})")
        report.retention_purges = len(below)
        if report.files_before > 1 or uids or below:
            target = self.config.target_file_bytes
            self._retrying(table, lambda: table.optimize.z_order(["stream_uid"], target_size=target))
        table.create_checkpoint()
        table.cleanup_metadata()
        report.vacuumed_files = vacuum(self.config.vacuum_retention_hours)
        table.update_incremental()
        report.files_after = len(table.file_uris())
        report.seconds = round(time.perf_counter() - started, 3)
        return report

    def _commit(self, table: DeltaTable, delete_predicate: str) -> None:
        self._retrying(table, lambda: table.delete(delete_predicate))

    @staticmethod
    def _retrying(table: DeltaTable, operation: Callable[[], object]) -> None:
        for attempt in range(_ATTEMPTS):
            try:
                table.update_incremental()
                operation()
                return
            except CommitFailedError:
                if attempt == _ATTEMPTS - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))


def _batches(items: list[_T]) -> Iterable[list[_T]]:
    for start in range(0, len(items), _DELETE_BATCH):
        yield items[start : start + _DELETE_BATCH]


class Compaction:
    """The background loop and the bookkeeping between passes (see the module docstring)."""

    def __init__(self, compactor: Compactor, vacuum: Callable[[int], int], observer: StorageObserver) -> None:
        self.compactor = compactor
        self._vacuum = vacuum
        self._observer = observer
        self.view: StateView | None = None
        self._removed_uids: set[int] = set()
        self._retention_done: dict[int, int] = {}
        self._lock = asyncio.Lock()

    def note_flushed(self, states: Mapping[int, StreamState]) -> None:
        """The flusher committed these states: deleted ones can now be purged."""
        self._removed_uids.update(uid for uid, state in states.items() if state.get("deleted"))

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(self.compactor.config.interval_s)
            try:
                await self.compact()
            except Exception as error:  # the next pass retries; the table stays consistent
                _storage_log.warning("compaction pass failed", extra={"error": str(error)})

    async def compact(self) -> CompactionReport:
        """One compaction pass over what has been flushed; runs beside appends and reads."""
        assert self.view is not None
        async with self._lock:
            removed = set(self._removed_uids)
            retention = {
                uid: seq for uid, seq in self.view.retention_plan().items() if seq > self._retention_done.get(uid, 0)
            }
            started = time.perf_counter()
            try:
                report = await asyncio.to_thread(self.compactor.run_once, removed, retention, self._vacuum)
            except Exception:
                self._observer.compaction(time.perf_counter() - started, False)
                raise
            self._observer.compaction(time.perf_counter() - started, True)
            # (vacuum refreshed the writer's handle after the pass's last commit)
            self._removed_uids -= removed
            self._retention_done.update(retention)
        _storage_log.info(
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
