"""Direct history reads, executing: one task reads its ``DirectRange`` from the Parquet files.

Runs on executors. The partition lists absolute file URLs (signed by the server, or
presigned object-store URLs) and the row groups that may hold its messages. Each file is
read through HTTP ``Range`` requests (``_RangeFile``: the footer, then the row groups'
column chunks, nothing else), or straight from the server's local path where the executor
sees the same file (same machine, shared filesystem), the rows filtered to the partition's stream incarnation
(``stream_uid``), ``kind = 'message'`` and sequence range, and ordered by ``seq``: exactly
the ``seq``, ``ts`` and ``data`` an Arrow read over HTTP returns for the range. The rows are
then built like those of an Arrow response (``RowBuilder.arrow_batches``).

Never silent loss: the rows must be exactly ``first, first + 1, …, end - 1``. A file that is
gone (404: compacted and vacuumed) or whose URL expired (403) or rows short of the range
make the task ask the server for a new plan of its range and read that (up to
``_ATTEMPTS`` times); what is still missing then is an error. A re-plan answered ``410``
(retention moved past the range meanwhile) is data loss: ``DataLossError`` with
``failOnDataLoss=true``, else the range is read over HTTP, which re-initializes from the
bootstrap as any HTTP read does.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import requests
from pyspark.sql.types import StructType

from ._direct_plans import DirectRange, FileSlice, fetch_plan, file_slice
from ._offsets import seq_offset
from ._rows import RowBuilder
from ._task_reader import DataLossError, StreamRange, gone_message, make_client, read_range
from .client import Gone
from .client.arrow import ArrowSlice
from .options import ReadOptions

_ATTEMPTS = 3
_ROW_COLUMNS = ["seq", "ts", "data"]
_FILTER_COLUMNS = ["stream_uid", "kind", *_ROW_COLUMNS]
_ROWS = pa.schema([("seq", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("data", pa.binary())])
_Rows = Literal["all", "stream", "mixed"]


class FileGone(RuntimeError):
    """A planned file is no longer there, or its URL no longer valid: re-plan."""


class _RangeFile(io.RawIOBase):
    """A read-only, seekable file over HTTP ``Range`` GETs of one URL of known size."""

    def __init__(self, http: requests.Session, url: str, size: int, timeout_s: float) -> None:
        self._http, self._url, self._size, self._timeout = http, url, size, timeout_s
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, size: int = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._pos + size)
        if end <= self._pos:
            return b""
        try:
            response = self._http.get(
                self._url, headers={"Range": f"bytes={self._pos}-{end - 1}"}, timeout=self._timeout
            )
            data = response.content
        except requests.RequestException as exc:  # e.g. the file vacuumed while it was being sent
            raise FileGone(f"reading a planned file failed: {exc}") from exc
        if response.status_code in (403, 404, 410):
            raise FileGone(f"{response.status_code} for a planned file: {response.text[:300]}")
        if response.status_code not in (200, 206):
            response.raise_for_status()
            raise OSError(f"unexpected status {response.status_code} reading a planned file")
        if response.status_code == 200:
            data = data[self._pos : end]
        self._pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def read_direct(options: ReadOptions, schema: StructType, part: DirectRange) -> Iterator[pa.RecordBatch]:
    table = _rows_of(options, part)
    if table is None:  # 410 with failOnDataLoss=false: the HTTP read re-initializes from /bootstrap
        http_part = StreamRange(part.key, part.url, seq_offset(part.first), seq_offset(part.end), "arrow")
        yield from read_range(options, schema, http_part)
        return
    found = ArrowSlice(seq_offset(part.first), seq_offset(part.end), part.content_type, table)
    yield from RowBuilder(schema, part.key).arrow_batches(found, seq_offset(part.end))


def _rows_of(options: ReadOptions, part: DirectRange) -> pa.Table | None:
    """The partition's messages as ``seq``, ``ts``, ``data``, in order; ``None``: gone, read over HTTP."""
    files = part.files
    problem = ""
    with requests.Session() as http:
        http.trust_env = False
        http.verify = options.connection.ca_cert_file or True
        for attempt in range(_ATTEMPTS):
            if attempt:
                replanned = _replan(options, part)
                if replanned is None:
                    return None
                files = replanned
            try:
                table = _read_files(http, files, part, options)
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


def _read_files(
    http: requests.Session, files: tuple[FileSlice, ...], part: DirectRange, options: ReadOptions
) -> pa.Table:
    tables = []
    for planned in files:
        parquet = pq.ParquetFile(_open(http, planned, options), pre_buffer=True)
        for rows, groups in _runs(parquet.metadata, planned.row_groups, part):
            tables.append(_read_run(parquet, rows, groups, part))
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


def _read_run(parquet: pq.ParquetFile, rows: _Rows, groups: list[int], part: DirectRange) -> pa.Table:
    """The run's rows of the partition as ``seq``, ``ts``, ``data``. Row groups of the
    partition's stream only are read without the ``stream_uid`` and ``kind`` columns, and
    those wholly inside its range without a filter (most of a backlog: no copy)."""
    read = parquet.read_row_groups(
        groups, columns=_FILTER_COLUMNS if rows == "mixed" else _ROW_COLUMNS, use_threads=False
    )
    if rows != "all":
        mask = pc.and_(pc.greater_equal(read["seq"], part.first), pc.less(read["seq"], part.end))
        if rows == "mixed":
            stream = pc.and_(
                pc.equal(read["stream_uid"], part.uid), pc.equal(read["kind"].cast(pa.string()), "message")
            )
            mask = pc.and_(stream, mask)
        read = read.filter(mask)
    return read.select(_ROWS.names).cast(_ROWS)


def _open(http: requests.Session, planned: FileSlice, options: ReadOptions) -> pa.NativeFile:
    """The file at the server's local path where this executor sees it (same size) and option
    ``localFiles`` allows it, else over its URL."""
    if planned.local is not None and options.local_files:
        try:
            if os.path.getsize(planned.local) == planned.size:
                return pa.memory_map(planned.local)
        except OSError:
            pass  # not on this machine, or vacuumed: the URL says which (404: re-plan)
    return pa.PythonFile(_RangeFile(http, planned.url, planned.size, options.connection.timeout_s), mode="r")


def _replan(options: ReadOptions, part: DirectRange) -> tuple[FileSlice, ...] | None:
    """The files of a new plan of the partition's range; ``None`` if it is gone (410) and
    ``failOnDataLoss=false``."""
    with make_client(options.connection) as client:
        try:
            plan = fetch_plan(client.transport, part.url, seq_offset(part.first), seq_offset(part.end))
        except Gone as exc:
            if options.fail_on_data_loss:
                raise DataLossError(gone_message(part.key, seq_offset(part.first), exc)) from exc
            return None
    if plan["incarnation"] != part.incarnation:
        raise DataLossError(
            f"stream {part.key} was deleted and created again while a batch read it (incarnation "
            f"{part.incarnation} -> {plan['incarnation']})"
        )
    if int(plan["delta_end"][:16]) < part.end:
        raise DataLossError(f"stream {part.key}: a new read plan no longer covers {seq_offset(part.end)}")
    return tuple(
        file_slice(file, tuple(int(g["index"]) for g in file["row_groups"]))
        for segment in plan["segments"]
        if int(segment["stream_uid"]) == part.uid
        for file in segment["files"]
    )
