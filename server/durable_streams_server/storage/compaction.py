"""Background maintenance of the Delta table: state checkpoints, bin-packing, purges, vacuum.

Every cost here follows the work written since the last pass, never the table's history.
One pass, each step its own atomic Delta commit (or an idempotent file operation), so a
``kill -9`` at any moment leaves a consistent table and the next pass redoes what is left:

1. **state checkpoint** (``state_checkpoint``), when rows were written since the last one,
   so that step 3 can drop the rows it supersedes;
2. **purges**: every row of the removed uids (their tombstones too) in few ``DELETE``
   commits of up to ``_PURGE_BATCH`` uids, pruned to the files that can hold them (a uid is
   the LSN of its creation, so no row of it has a smaller LSN); then the messages below
   retention points (snapshots' and retention policies', moved by the engine just before
   the pass: ``engine.retention``). Each ``DELETE`` rewrites only the files holding such rows;
3. **bin-packing** (``compaction_plan``): the small files written since the last pass, cut
   into bins of about ``target_file_bytes``; each bin is read, sorted and cleaned within
   ``memory_bytes`` whatever its size (``bin_rewrite``: an external sort spilling to
   ``spill_dir``), and streamed into one file sorted by
   ``(kind, stream_uid, seq)``, so a stream's messages are contiguous row groups of about
   ``row_group_bytes`` that reads find by their statistics; ``state``/``subscription`` rows
   superseded by a newer row of the bin or by the checkpoint are dropped. Files already
   compacted are settled and left alone; a pass with nothing new writes nothing;
4. **vacuum** of data files no version newer than ``vacuum_retention_hours`` uses.

Every commit that removes files goes through the writer's handle under its lock
(``DeltaLog.rewrite``/``delete``/``vacuum``), so it never races the flusher; the reading and
sorting of a bin's runs happen outside the lock, their merge as the writer consumes it.
Purges are durable intentions: a removed stream's tombstone (its state marked deleted) is
in Delta before it is purged, stays in state checkpoints, goes in the same commit as the
rest of its rows, and is loaded at recovery (``Compaction.recovered``), so a purge
interrupted by a crash or a restart is resumed by the next pass. Retention points are part of stream state.

``Compaction`` schedules the passes (every ``interval_s``, or on demand through
``Storage.compact``) and the state checkpoints (``CheckpointPolicy``, after flushes, also
with passes turned off) on worker threads, one at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
from deltalake import DeltaTable

from .bin_rewrite import BinRewrite
from .compaction_plan import Bin, plan_bins
from .data_files import DataFiles
from .delta_log import DeltaLog
from .observer import StorageObserver
from .state_checkpoint import CHECKPOINT_APP_ID, CheckpointPolicy
from .table_schema import KIND_MESSAGE, SCHEMA
from .view import StateView, StreamState

log = logging.getLogger("durable_streams_server.compaction")
_storage_log = logging.getLogger("durable_streams_server.storage")

_T = TypeVar("_T")
_PURGE_BATCH = 10_000
_RETENTION_BATCH = 500


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    interval_s: float = 600.0
    target_file_bytes: int = 128 * 1024 * 1024
    """Bins are cut at about this many bytes of input files; each becomes one file."""
    row_group_bytes: int = 8 * 1024 * 1024
    """About this many bytes of rows per row group of a compacted file."""
    memory_bytes: int = 64 * 1024 * 1024
    """The rows a pass holds at once take about this many bytes (``bin_rewrite``), whatever the
    size of a bin; the Delta writer's buffers come on top."""
    spill_dir: Path | None = None
    """Where a bin's sorted runs are spilled (its leftovers are removed at start); ``None``:
    the system's temporary directory."""
    vacuum_retention_hours: int = 1
    log_retention_hours: int = 0


@dataclass
class CompactionReport:
    files_before: int = 0
    files_after: int = 0
    bins: int = 0
    bytes_rewritten: int = 0
    purged_uids: int = 0
    retention_purges: int = 0
    vacuumed_files: int = 0
    seconds: float = 0.0


class Compactor:
    """One pass (blocking; see the module docstring)."""

    def __init__(self, delta: DeltaLog, config: CompactionConfig) -> None:
        self.delta = delta
        self.config = config
        self._bins = BinRewrite(DataFiles(delta.uri), config.memory_bytes, config.spill_dir)

    def run_once(self, removed_uids: Iterable[int], retention: Mapping[int, int]) -> CompactionReport:
        """``retention`` maps uid -> first retained seq."""
        started = time.perf_counter()
        report = CompactionReport(files_before=len(self.delta.file_spans()))
        removed = sorted(set(removed_uids))
        for batch in _batches(removed, _PURGE_BATCH):
            self.delta.delete(f"stream_uid IN ({', '.join(map(str, batch))}) AND lsn >= {batch[0]}")
        report.purged_uids = len(removed)
        below = sorted(retention.items())
        for range_batch in _batches(below, _RETENTION_BATCH):
            clauses = " OR ".join(f"(stream_uid = {uid} AND seq < {seq})" for uid, seq in range_batch)
            self.delta.delete(f"kind = '{KIND_MESSAGE}' AND lsn >= {range_batch[0][0]} AND ({clauses})")
        report.retention_purges = len(below)
        target = self.config.target_file_bytes
        bins = plan_bins(self.delta.file_spans(), target, settled_bytes=target // 2)
        if bins:
            table = DeltaTable(self.delta.uri, storage_options=self.delta.storage_options)
            checkpoint = table.transaction_version(CHECKPOINT_APP_ID) or 0
            for bin_ in bins:
                if self._rewrite(table, bin_, checkpoint):
                    report.bins += 1
                    report.bytes_rewritten += bin_.size
        report.vacuumed_files = self.delta.vacuum(self.config.vacuum_retention_hours)
        report.files_after = len(self.delta.file_spans())
        report.seconds = round(time.perf_counter() - started, 3)
        return report

    def _rewrite(self, table: DeltaTable, bin_: Bin, checkpoint: int) -> bool:
        with self._bins.ordered(table, bin_, checkpoint, self.config.row_group_bytes) as (rows, group_rows):
            done = self.delta.rewrite(bin_, pa.RecordBatchReader.from_batches(SCHEMA, rows), group_rows)
        pa.default_memory_pool().release_unused()
        if not done:
            log.warning("compaction bin skipped: its files changed", extra={"lo": bin_.lo, "hi": bin_.hi})
        return done


def _batches(items: list[_T], size: int) -> Iterable[list[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Compaction:
    """The background loop and the bookkeeping between passes (see the module docstring)."""

    def __init__(self, compactor: Compactor, observer: StorageObserver) -> None:
        self.compactor = compactor
        self._observer = observer
        self.view: StateView | None = None
        self.policy = CheckpointPolicy()
        self._removed_uids: set[int] = set()
        self._retention_done: dict[int, int] = {}
        self._lock = asyncio.Lock()
        self._checkpointing: asyncio.Task[None] | None = None

    def recovered(self, states: Mapping[int, StreamState], checkpoint: tuple[int, int, int]) -> None:
        """Recovery found these states (tombstones among them: purges to resume) and a state
        checkpoint of ``checkpoint[0]`` rows with ``checkpoint[1]`` commits of
        ``checkpoint[2]`` rows after it."""
        self.note_flushed(states, count=False)
        self.policy.taken(*checkpoint)

    def note_flushed(self, states: Mapping[int, StreamState], *, count: bool = True) -> None:
        """The flusher committed these states: deleted ones can now be purged."""
        self._removed_uids.update(uid for uid, state in states.items() if state.get("deleted"))
        if not count:
            return
        self.policy.note_commit(len(states))
        if self.policy.due() and self._checkpointing is None and not self._lock.locked():
            self._checkpointing = asyncio.get_running_loop().create_task(self._checkpoint())

    @property
    def pending_purges(self) -> int:
        return len(self._removed_uids)

    async def _checkpoint(self) -> None:
        try:
            async with self._lock:
                rows = await asyncio.to_thread(self.compactor.delta.write_state_checkpoint)
                self.policy.taken(rows)
            _storage_log.debug("state checkpoint", extra={"rows": rows})
        except Exception as error:  # the next flush tries again; recovery reads more rows meanwhile
            _storage_log.warning("state checkpoint failed", extra={"error": str(error)})
        finally:
            self._checkpointing = None

    async def close(self) -> None:
        """Wait for a state checkpoint in progress (its thread cannot be interrupted)."""
        if self._checkpointing is not None:
            await asyncio.shield(self._checkpointing)

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
        await self.view.advance_retention()  # (points in Delta by now are purged below this pass)
        async with self._lock:
            removed = set(self._removed_uids)
            retention = {
                uid: seq for uid, seq in self.view.retention_plan().items() if seq > self._retention_done.get(uid, 0)
            }
            started = time.perf_counter()
            try:
                if self.policy.commits:
                    self.policy.taken(await asyncio.to_thread(self.compactor.delta.write_state_checkpoint))
                report = await asyncio.to_thread(self.compactor.run_once, removed, retention)
            except Exception:
                self._observer.compaction(time.perf_counter() - started, False)
                raise
            self._observer.compaction(time.perf_counter() - started, True)
            self._removed_uids -= removed
            self._retention_done.update(retention)
        _storage_log.info(
            "compacted",
            extra={
                "files_before": report.files_before,
                "files_after": report.files_after,
                "bins": report.bins,
                "bytes_rewritten": report.bytes_rewritten,
                "purged_streams": report.purged_uids,
                "retention_purges": report.retention_purges,
                "vacuumed_files": report.vacuumed_files,
                "seconds": report.seconds,
            },
        )
        return report
