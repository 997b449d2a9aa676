"""Read plans: which data files of one table version hold a stream's messages in a range.

A Spark job catching up on history reads the Parquet files itself (``pyspark_durable_streams``
``_direct_reads``); the server only says what to read. ``ReadPlanner.plan`` takes segments
``(uid, first seq, end seq)`` (a fork's range is several: its source's uid below the fork
point, its own above), refreshes its own snapshot of the table, and answers with that
snapshot's version and, per segment, the files whose Delta log statistics (``stream_uid``,
``kind``, ``seq``) can hold messages of the uid in the range, each with the row groups whose
Parquet footer statistics can (footers are cached: data files are immutable; row groups
of ``state`` rows only are left out). A row group
is ``exact`` when its ``stream_uid`` statistics say it holds that uid only, so its ``seq``
statistics are the uid's own. Planning reads the Delta log and footers, never data pages.

How executors reach a file (``FileAccess``): an ``s3://`` table's files with static
credentials by presigned GETs (``presign``), valid ``ttl_s``; every other table's through the
server's own file endpoint (the HTTP layer signs those URLs). The server answers them from
the local file (the plan also names its path, for readers that share the server's
filesystem) or, for a table on any other object store, with the bytes it reads from the
store (``stored_files``). Every table the server can open thus has plans.

Lifetime: a planned file is in the table version the plan names, so compaction may only
remove it afterwards, and vacuum deletes a removed file ``vacuum_retention_hours`` after
that: a plan used within ``ttl_s`` (which the configuration keeps at or below the vacuum
retention) finds its files. A reader finding one gone anyway (a shorter retention) asks
for a new plan.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.fs import DeltaStorageHandler

from .data_files import local_root
from .footers import FooterCache, message_files, message_row_groups
from .presign import S3Presigner
from .stored_files import StoredFiles, is_data_file_path
from .time_index import GROUP_COLUMNS, first_at

_COLUMNS = ["path", "size_bytes", "min.stream_uid", "max.stream_uid", "min.seq", "max.seq", "min.kind", "max.kind"]


@dataclass(frozen=True, slots=True)
class RowGroupSpan:
    index: int
    first_seq: int
    last_seq: int
    rows: int
    exact: bool
    """The row group holds messages of this uid only: ``first_seq``/``last_seq`` are its own."""


@dataclass(frozen=True, slots=True)
class PlannedFile:
    path: str
    """Relative to the table root, as in the Delta log."""
    size: int
    url: str | None
    """A presigned URL (S3); ``None``: the HTTP layer signs one to its file endpoint."""
    local: str | None
    """A local table's file: readers on the same filesystem may open it instead of the URL."""
    row_groups: tuple[RowGroupSpan, ...]


@dataclass(frozen=True, slots=True)
class TablePlan:
    version: int
    segments: list[list[PlannedFile]]


class FileAccess:
    """How readers reach the table's files: exactly one of ``local_root`` (a local table),
    ``presigner`` (an ``s3://`` table with static credentials) and ``stored`` (any other
    object store: the server reads the files it serves)."""

    def __init__(self, uri: str, storage_options: Mapping[str, str]) -> None:
        root = local_root(uri)
        self.local_root = Path(root).resolve() if root is not None else None
        self.presigner = S3Presigner.for_table(uri, storage_options) if root is None else None
        self.stored = StoredFiles(uri, storage_options) if root is None and self.presigner is None else None

    def local_file(self, path: str) -> Path | None:
        """The local file of a table path, ``None`` unless it is a file inside the table root."""
        if self.local_root is None or not is_data_file_path(path):
            return None
        candidate = (self.local_root / path).resolve()
        if candidate.parent != self.local_root and self.local_root not in candidate.parents:
            return None
        if "_delta_log" in candidate.relative_to(self.local_root).parts or not candidate.is_file():
            return None
        return candidate


class ReadPlanner:
    def __init__(self, uri: str, storage_options: Mapping[str, str], ttl_s: int) -> None:
        self.uri = uri
        self.storage_options = dict(storage_options)
        self.ttl_s = ttl_s
        self.access = FileAccess(uri, storage_options)
        self.plans = 0
        self._lock = threading.Lock()
        self._table: DeltaTable | None = None
        handler = DeltaStorageHandler(uri, self.storage_options)
        self._open = handler.open_input_file
        self._footers = FooterCache(handler.open_input_file)

    def plan(self, segments: Sequence[tuple[int, int, int]]) -> TablePlan:
        """The files of the newest table version that may hold messages ``first <= seq < end``
        of each segment's uid, ordered by their first sequence number. Blocks."""
        with self._lock:
            self.plans += 1
            version, files = self._files()
        return TablePlan(version, [self._segment(files, uid, first, end) for uid, first, end in segments])

    def first_at(self, segments: Sequence[tuple[int, int, int]], at_us: int) -> int | None:
        """The first ``seq`` of the segments (in order) whose message was appended at or after
        ``at_us`` (``time_index``), ``None`` if no stored one was. Blocks."""
        with self._lock:
            _, files = self._files()
        for segment in segments:
            found = first_at(files, self._footers.row_groups, self._read_group, segment, at_us)
            if found is not None:
                return found
        return None

    def _files(self) -> tuple[int, pa.Table]:
        """(Under the lock.) The newest table version and its add actions' statistics."""
        if self._table is None:
            self._table = DeltaTable(self.uri, storage_options=self.storage_options)
        else:
            self._table.update_incremental()
        actions = pa.table(self._table.get_add_actions(flatten=True))
        return self._table.version(), actions.select([c for c in [*_COLUMNS, "max.ts"] if c in actions.column_names])

    def _read_group(self, path: str, index: int) -> pa.Table:
        return pq.ParquetFile(self._open(path)).read_row_group(index, columns=GROUP_COLUMNS)

    def _segment(self, files: pa.Table, uid: int, first: int, end: int) -> list[PlannedFile]:
        if end <= first or files.num_rows == 0:
            return []
        chosen = message_files(files, uid, first, end)
        planned = []
        for path, size in zip(chosen["path"].to_pylist(), chosen["size_bytes"].to_pylist(), strict=True):
            groups = self._row_groups(path, uid, first, end)
            if groups:
                url = self.access.presigner.url(path, self.ttl_s) if self.access.presigner is not None else None
                local = str(self.access.local_root / path) if self.access.local_root is not None else None
                planned.append(PlannedFile(path, int(size), url, local, groups))
        return planned

    def _row_groups(self, path: str, uid: int, first: int, end: int) -> tuple[RowGroupSpan, ...]:
        return tuple(
            RowGroupSpan(group.index, group.first_seq, group.last_seq, group.rows, group.only_stream)
            for group in message_row_groups(self._footers.row_groups(path), uid, first, end)
        )
