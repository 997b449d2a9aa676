"""The state rows recovery and state checkpoints read, straight from the data files.

Recovery (``DeltaLog.load_rows``) and every state checkpoint (``write_state_checkpoint``)
want the ``state`` and ``subscription`` rows from the last state checkpoint's LSN on: the
checkpoint's file plus one small flush file per commit after it (``state_checkpoint``). A
shard's new owner serves nothing until it has read them, so their cost is part of every
failover.

Read through a Delta scan, each of those files cost about three requests one after another
on an object store (the footer's length, the footer, the row groups' column chunks): 12-22
ms a file on moto, 0.5-1 s for the 24-53 commits a busy shard leaves after its checkpoint.
Read here, a file of at most ``WHOLE_FILE_BYTES`` is fetched whole in one GET and decoded
from memory, and a larger one is opened by its size from the Delta log (no HEAD) with only
its state row groups read. The plan is the scan's: the files whose ``lsn`` statistics reach
the checkpoint and whose ``kind`` statistics can hold the kinds asked for; in each, the row
groups whose statistics can (a flush writes its state rows in row groups of their own after
the messages: ``commit_rows``); then the rows themselves are filtered.

Reading files the Delta log lists, without delta-rs's scan, is what the history reader does
for every read (``history_reader``): the table has no partition columns, no deletion vectors
and no column mapping (this server writes it; ``table_schema``), so a data file's rows are
the table's rows.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.fs import DeltaStorageHandler

from .data_files import WHOLE_FILE_BYTES, local_root, open_local
from .table_schema import SCHEMA

_GROUPS_AT_ONCE = 8
"""Row groups ``read`` decodes at once: a state checkpoint's file holds every stream's row
(row groups of ``state_checkpoint.BATCH_ROWS``), and decoding it whole, then filtering it,
held it two to three times over (a million streams: ~570 MiB above the ~270 MiB of rows
read). Eight of its row groups are ~30 MiB; every row of them is usually wanted, and then
they are kept as decoded, not filtered into a copy."""
_BUFFER_BYTES = 1 << 20
"""Read buffer of a row group's column chunks in ``batches``: pages are fetched as they are
decoded, not a column chunk (of a checkpoint's hundreds of thousands of rows) at once."""


@dataclass(frozen=True)
class StateFiles:
    """The files of one table snapshot that may hold the rows asked for (``plan``), read
    without the snapshot (``read``): a writer may move the table on meanwhile."""

    files: tuple[tuple[str, int], ...]
    """(path, size) of each file to read."""
    kinds: tuple[str, ...]
    since_lsn: int
    root: str | None
    """A local table's directory; ``None``: an object store, read through ``handler``."""
    handler: Any

    @staticmethod
    def plan(table: DeltaTable, storage_options: dict[str, str], kinds: Sequence[str], since_lsn: int) -> StateFiles:
        """The files of ``table``'s snapshot whose statistics can hold rows of ``kinds`` with
        ``lsn >= since_lsn``."""
        wanted = (min(kinds), max(kinds))
        actions = pa.table(table.get_add_actions(flatten=True))
        files = tuple(
            (path, size)
            for path, size, max_lsn, min_kind, max_kind in zip(
                actions["path"].to_pylist(),
                actions["size_bytes"].to_pylist(),
                actions["max.lsn"].to_pylist(),
                actions["min.kind"].to_pylist(),
                actions["max.kind"].to_pylist(),
                strict=True,
            )
            if _may_hold(max_lsn, min_kind, max_kind, since_lsn, wanted)
        )
        root = local_root(table.table_uri)
        handler = None
        if root is None and files:  # (files opened by their size from the log: no HEAD)
            handler = DeltaStorageHandler.from_table(table._table, storage_options, dict(files))._handler
        return StateFiles(files, tuple(kinds), since_lsn, root, handler)

    def read(self, columns: Sequence[str] | None = None) -> pa.Table:
        """The planned rows, ``columns`` of them (every column: ``None``), typed as ``SCHEMA``."""
        names = list(columns) if columns is not None else SCHEMA.names
        schema = pa.schema([SCHEMA.field(name) for name in names])
        pieces = [schema.empty_table()]
        for _, parquet, groups in self._planned(pre_buffer=True):
            for at in range(0, len(groups), _GROUPS_AT_ONCE):
                # (files delta-rs rewrote, by a DELETE, hold view types: cast before comparing)
                rows = parquet.read_row_groups(groups[at : at + _GROUPS_AT_ONCE], columns=names).cast(schema)
                matching = self.matching(rows)
                pieces.append(rows if pc.sum(matching).as_py() == rows.num_rows else rows.filter(matching))
        return pa.concat_tables(pieces)

    def batches(
        self, columns: Sequence[str], rows: int, only: Container[int] | None = None
    ) -> Iterator[tuple[int, int, pa.RecordBatch]]:
        """The planned row groups' rows, unfiltered (``matching`` says which are asked for), in
        batches of at most ``rows``: ``(file, position, batch)``, the file's index in ``files``
        and the position of the batch's first row among the rows of its file's planned row
        groups; of the files whose index is in ``only`` (every file: ``None``). One batch is
        decoded at a time, and two passes see the same positions."""
        schema = pa.schema([SCHEMA.field(name) for name in columns])
        for file, parquet, groups in self._planned(only, buffer_size=_BUFFER_BYTES):
            position = 0
            for batch in parquet.iter_batches(rows, row_groups=groups, columns=list(columns), use_threads=False):
                yield file, position, batch.cast(schema)
                position += batch.num_rows

    def matching(self, rows: pa.Table | pa.RecordBatch) -> pa.Array:
        """Which of ``rows`` (with ``kind`` and ``lsn``) are asked for."""
        kinds = pc.is_in(rows["kind"], pa.array(list(self.kinds)))
        return pc.and_(kinds, pc.greater_equal(rows["lsn"], self.since_lsn))

    def _planned(
        self, only: Container[int] | None = None, **options: Any
    ) -> Iterator[tuple[int, pq.ParquetFile, list[int]]]:
        """Each planned file that has row groups to read (of those in ``only``, if given), open
        (``pq.ParquetFile`` with ``options``) while the caller reads it: ``(file, parquet,
        groups)``, the file's index in ``files`` and the row groups whose statistics can hold
        the rows asked for."""
        wanted = (min(self.kinds), max(self.kinds))
        for file, (path, size) in enumerate(self.files):
            if only is not None and file not in only:
                continue
            with self._open(path, size) as source, pq.ParquetFile(source, **options) as parquet:
                groups = _row_groups(parquet.metadata, self.since_lsn, wanted)
                if groups:
                    yield file, parquet, groups

    def _open(self, path: str, size: int) -> pa.NativeFile:
        """The file, closed by its caller (a ``ParquetFile`` closes only what it opened itself)."""
        if self.root is not None:
            return open_local(self.root, path)
        raw = self.handler.open_input_file(path)
        if size > WHOLE_FILE_BYTES:
            return pa.PythonFile(raw, mode="r")
        try:  # (one GET, decoded from memory)
            return pa.BufferReader(raw.read())
        finally:
            raw.close()


def _may_hold(max_lsn: Any, min_kind: Any, max_kind: Any, since_lsn: int, wanted: tuple[str, str]) -> bool:
    """Whether statistics (``None``: not recorded) let a file or row group hold rows asked for."""
    if max_lsn is not None and max_lsn < since_lsn:
        return False
    return (min_kind is None or min_kind <= wanted[1]) and (max_kind is None or max_kind >= wanted[0])


def _row_groups(metadata: pq.FileMetaData, since_lsn: int, wanted: tuple[str, str]) -> list[int]:
    names = metadata.schema.names
    kind_at, lsn_at = names.index("kind"), names.index("lsn")
    groups = []
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        kind, lsn = group.column(kind_at).statistics, group.column(lsn_at).statistics
        kinds = (kind.min, kind.max) if kind is not None and kind.has_min_max else (None, None)
        max_lsn = lsn.max if lsn is not None and lsn.has_min_max else None
        if _may_hold(max_lsn, kinds[0], kinds[1], since_lsn, wanted):
            groups.append(index)
    return groups
