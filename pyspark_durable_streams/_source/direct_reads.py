"""Direct history reads, executing: one task reads its ``DirectRange`` from the Parquet files.

Runs on executors. The partition lists its files (``direct_files`` opens them: the server's
local path where the executor sees it, else the signed URL, through the task's one client)
and the row groups that may hold its messages. The rows are filtered to the partition's
stream incarnation (``stream_uid``), ``kind = 'message'`` and sequence range: exactly the
``seq``, ``ts`` and ``data`` an Arrow read over HTTP returns for the range, built into rows
like those of an Arrow response (``RowBuilder.arrow_batches``).

The Parquet statistics of each row group say what it holds. Row groups of the stream's
messages only (most of a backlog) are read without the ``stream_uid`` and ``kind`` columns,
and those wholly inside the partition without a filter; only the others are filtered. The
rows are streamed: decoded ``BATCH_ROWS`` at a time, in the plan's order, each batch turned
into rows and handed to Spark before the next is read (no copy of the partition, and Spark
starts on the first rows at once).

Never silent loss: every batch must continue the partition's messages exactly (``first,
first + 1, …``). Where one does not (a gap, rows out of order), or a file is gone (404:
compacted and vacuumed) or its URL expired (403), or the files end short of the range, the
rest of the range is read again the careful way: all of it first, sorted by ``seq`` and
checked to be complete, asking the server for a new plan of it when not (up to ``_ATTEMPTS``
times); what is still missing then is an error. A re-plan answered ``410`` (retention moved
past the range meanwhile) is data loss: ``DataLossError`` with ``failOnDataLoss=true``, else the
rest is read over HTTP, which re-initializes from the bootstrap as any HTTP read does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.types import StructType

from .._connect import connect
from ..client import Client, Gone
from ..client.arrow import ArrowSlice
from ..options import ReadOptions
from .direct_files import FileGone, open_parquet
from .direct_plans import DirectRange, FileSlice, file_slice
from .offsets import seq_of, seq_offset
from .rows import BATCH_ROWS, RowBuilder
from .task_reader import DataLossError, StreamRange, gone_message, read_range

__all__ = ["DataLossError", "FileGone", "read_direct"]

_ATTEMPTS = 3
_ROW_COLUMNS = ["seq", "ts", "data"]
_FILTER_COLUMNS = ["stream_uid", "kind", *_ROW_COLUMNS]
_ROWS = pa.schema([("seq", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("data", pa.binary())])
_Rows = Literal["all", "stream", "mixed"]


def read_direct(options: ReadOptions, schema: StructType, part: DirectRange) -> Iterator[pa.RecordBatch]:
    builder, end = RowBuilder(schema, part.key), seq_offset(part.end)
    done = part.first  # the messages before it are handed out, exactly and in order
    with connect(options.connection, part.url) as client:
        try:
            for rows in _planned_rows(client, part.files, part, options):
                if not _continues(rows, done):
                    break
                yield from builder.arrow_batches(ArrowSlice(seq_offset(done), end, part.content_type, rows), end)
                done += rows.num_rows
                if done == part.end:
                    break
        except FileGone:
            pass
        if done == part.end:
            return
        rest = dataclasses.replace(part, first=done)
        table = _rows_of(client, options, rest)
    if table is None:  # 410 with failOnDataLoss=false: the HTTP read re-initializes from /bootstrap
        yield from read_range(options, schema, StreamRange(part.key, part.url, seq_offset(done), end, "arrow"))
        return
    yield from builder.arrow_batches(ArrowSlice(seq_offset(done), end, part.content_type, table), end)


def _continues(rows: pa.Table, done: int) -> bool:
    """Whether ``rows`` are exactly the messages ``done, done + 1, …``."""
    seqs = rows["seq"].to_numpy()
    return bool(seqs[0] == done and (np.diff(seqs) == 1).all())


def _rows_of(client: Client, options: ReadOptions, part: DirectRange) -> pa.Table | None:
    """The partition's messages as ``seq``, ``ts``, ``data``, all of them, in order (re-planned
    where the files fall short); ``None``: gone, read over HTTP."""
    files = part.files
    problem = ""
    for attempt in range(_ATTEMPTS):
        if attempt:
            replanned = _replan(client, options, part)
            if replanned is None:
                return None
            files = replanned
        try:
            table = _read_files(client, files, part, options)
        except FileGone as exc:
            problem = str(exc)
            continue
        seqs = table["seq"]
        if table.num_rows == part.end - part.first and (
            not table.num_rows or (seqs[0].as_py() == part.first and seqs[-1].as_py() == part.end - 1)
        ):
            return table
        problem = f"{table.num_rows} of {part.end - part.first} messages found in the planned files"
    raise DataLossError(
        f"stream {part.key}: messages [{seq_offset(part.first)}, {seq_offset(part.end)}) could not be read from "
        f"the Delta files of its read plans ({problem}); set option historyReads=http to read them over HTTP"
    )


def _read_files(client: Client, files: tuple[FileSlice, ...], part: DirectRange, options: ReadOptions) -> pa.Table:
    tables = list(_planned_rows(client, files, part, options))
    if not tables:
        return _ROWS.empty_table()
    table = pa.concat_tables(tables)
    if table.num_rows > 1:
        seqs = table["seq"].to_numpy()
        if not (seqs[1:] > seqs[:-1]).all():
            table = table.sort_by("seq")
            seqs = table["seq"].to_numpy()
        if (seqs[1:] == seqs[:-1]).any():  # one table version holds each message once
            raise DataLossError(f"stream {part.key}: a read plan listed a message twice")
    return table


def _planned_rows(
    client: Client, files: tuple[FileSlice, ...], part: DirectRange, options: ReadOptions
) -> Iterator[pa.Table]:
    """The partition's rows in the files' row groups, in the plan's order, ``BATCH_ROWS`` at a
    time (never empty)."""
    for planned in files:
        with open_parquet(client, planned, options) as parquet:
            for rows, groups in _runs(parquet.metadata, planned.row_groups, part):
                yield from _read_run(parquet, rows, groups, part)


def _runs(meta: pq.FileMetaData, planned: tuple[int, ...], part: DirectRange) -> list[tuple[_Rows, list[int]]]:
    """The planned row groups in order, in runs of those that need the same filtering."""
    columns = {meta.schema.column(i).name: i for i in range(meta.num_columns)}
    runs: list[tuple[_Rows, list[int]]] = []
    for index in planned:
        rows = _rows_in(meta.row_group(index), columns, part)
        if runs and runs[-1][0] == rows:
            runs[-1][1].append(index)
        else:
            runs.append((rows, [index]))
    return runs


def _rows_in(group: pq.RowGroupMetaData, columns: dict[str, int], part: DirectRange) -> _Rows:
    """What the row group's statistics say of its rows: all messages of the partition
    (``all``), all messages of its stream incarnation (``stream``), or anything (``mixed``)."""
    uid, kind, seq = (_min_max(group, columns.get(name)) for name in ("stream_uid", "kind", "seq"))
    if uid != (part.uid, part.uid) or kind != ("message", "message") or seq is None:
        return "mixed"
    return "all" if part.first <= seq[0] and seq[1] < part.end else "stream"


def _min_max(group: pq.RowGroupMetaData, column: int | None) -> tuple[Any, Any] | None:
    if column is None:
        return None
    stats = group.column(column).statistics
    if stats is None or not stats.has_min_max or stats.null_count:
        return None
    return stats.min, stats.max


def _read_run(parquet: pq.ParquetFile, rows: _Rows, groups: list[int], part: DirectRange) -> Iterator[pa.Table]:
    """The run's rows of the partition as ``seq``, ``ts``, ``data``, ``BATCH_ROWS`` at a time."""
    columns = _FILTER_COLUMNS if rows == "mixed" else _ROW_COLUMNS
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=groups, columns=columns, use_threads=False):
        read = pa.Table.from_batches([batch])
        if rows != "all":
            mask = pc.and_(pc.greater_equal(read["seq"], part.first), pc.less(read["seq"], part.end))
            if rows == "mixed":
                kind = read["kind"].cast(pa.string())
                mask = pc.and_(pc.and_(pc.equal(read["stream_uid"], part.uid), pc.equal(kind, "message")), mask)
            read = read.filter(mask)
        if read.num_rows:
            yield read.select(_ROWS.names).cast(_ROWS)


def _replan(client: Client, options: ReadOptions, part: DirectRange) -> tuple[FileSlice, ...] | None:
    """The files of a new plan of the partition's range; ``None`` if it is gone (410) and
    ``failOnDataLoss=false``."""
    try:
        plan = client.stream(part.url).read_plan(seq_offset(part.first), end=seq_offset(part.end))
    except Gone as exc:
        if options.fail_on_data_loss:
            raise DataLossError(gone_message(part.key, seq_offset(part.first), seq_offset(part.end), exc)) from exc
        return None
    if plan.incarnation != part.incarnation:
        raise DataLossError(
            f"stream {part.key} was deleted and created again while a batch read it (incarnation "
            f"{part.incarnation} -> {plan.incarnation})"
        )
    if seq_of(plan.delta_end) < part.end:
        raise DataLossError(f"stream {part.key}: a new read plan no longer covers {seq_offset(part.end)}")
    return tuple(
        file_slice(file, tuple(group.index for group in file.row_groups))
        for segment in plan.segments
        if segment.stream_uid == part.uid
        for file in segment.files
    )
