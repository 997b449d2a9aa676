"""Reading a stream's history from Delta: seek to what holds it, read only what a response needs.

Theory of operation
-------------------
**Planning.** The Delta log's add actions carry min/max statistics of every data file
(``stream_uid``, ``seq``, ``kind``). The reader keeps them as a file index of its own table
snapshot. A read of stream ``uid`` from ``start`` selects the files whose statistics can
hold messages of ``uid`` at or after ``start``; in each of them (footer cached) the row
groups whose ``stream_uid``/``seq`` statistics can; and orders those by their first seq.
Nothing is guessed: no message size is assumed, nothing is scanned beyond the plan.

**Reading.** A row group is read in batches of about the response's size (estimated from
the row group's bytes per row); reading stops as soon as the messages from ``start`` are
contiguous and fill the byte budget. A row group of at most ``WHOLE_GROUP_BYTES`` (a flush's
of about 256 KiB or one message, the compaction's of 8 MiB) has its column chunks fetched
whole when it is opened, one read each, as Arrow buffers, and Parquet's pages are slices of
them. A larger one is read through a buffered stream (``_BUFFER_BYTES``), its pages fetched
as they are decoded, so no read holds much more than ``WHOLE_GROUP_BYTES`` undecoded. The
buffered stream copies each page twice more (into its buffer, then out of it), and its
``read``s came as ``bytes``, one copy more: on catch-up reads of 1 MiB messages, whole chunks
took 2.9-3.9 ms of the server's CPU per MiB served against 3.3-4.1 (six reads of 400 MiB in
turn, on a machine twice as slow as the benchmarks of record). A read that starts in the
middle of a row group reads through the row group's start (Parquet cannot seek inside a
column chunk without a page index, which pyarrow does not use), so its cost is the response
plus at most one row group.

**Object stores.** A table's files on an object store are read through ``data_files.FileBytes``
(``files``): the bytes fetched (footer reads, column chunks; a file of at most 1 MiB whole,
in one GET) are kept by the file's path and size, bounded (``max_file_bytes``), and serve
every later read of any stream, across requests, table versions and refreshes: data files
are immutable. Files open with their size from the Delta log (no HEAD request). A fresh
owner, whose every read goes to Delta, thus fetches each small flush file once rather than
for every read. Local tables are read through the OS page cache.

**Cursors.** A read that stops inside its plan parks its position ``(uid, next seq)``: the
open batch iterator, the row groups still to read and the rows decoded beyond the response.
The next read from exactly that seq resumes there, so a catch-up reads every byte once
whatever the size of the row groups. Parked cursors are bounded in bytes
(``max_parked_bytes``: their decoded rows plus the row group they have open, its chunks or
one read buffer, and at least a read buffer each: that bounds how many are parked, each
holding a file open) and dropped least recently used.

**Concurrent maintenance.** Compaction may rewrite files between planning and reading, and
the flusher adds files. The snapshot is refreshed only when a plan comes up short: when the
plan is exhausted before the messages asked for (they were committed after the snapshot),
or a file of the plan is gone (rewritten and vacuumed). The read then re-plans from the
first message it still lacks; rows are never skipped: messages still missing after a
refresh are an error (``MissingHistory``). Old snapshots stay correct to read: history is
immutable, and what purges remove is never asked for (reads below retention get 410).

``bytes_read`` counts the bytes fetched from data files (footers included; on an object
store, not what the cache answered): tests and metrics see what a read cost. All methods
block; callers run them on worker threads.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.fs import DeltaStorageHandler

from .data_files import FileBytes, local_root, open_local
from .footers import FooterCache, message_files, message_row_groups
from .history_rows import HISTORY_COLUMNS, HISTORY_SCHEMA, add_runs, within_budget
from .row_group_streams import RowGroupStreams

_READ_COLUMNS = ["stream_uid", "kind", *HISTORY_COLUMNS]
WHOLE_GROUP_BYTES = 16 << 20
"""A row group of at most this many bytes (uncompressed, all columns) is read as whole column
chunks; a larger one through a read buffer (module docstring, "Reading")."""
_BUFFER_BYTES = 1 << 20
"""Read buffer of a larger row group's column chunks: Parquet pages are fetched as they are decoded."""
_MAX_BATCH_ROWS = 65_536
_MAX_FOOTERS = 4096
MAX_FILE_BYTES = 64 << 20
"""Object-store tables: bytes of data files kept for later reads (``data_files.FileBytes``)."""
_ATTEMPTS = 3
MAX_OPENS_PER_READ = 32
"""Row groups one read opens at most once it has a message: a stream spread over thousands
of small flush files (before compaction) answers in bounded time, a short read."""


class MissingHistory(RuntimeError):
    """Messages the caller asked for are not in the table (after a refresh)."""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    seq: int
    data: bytes
    ts_ms: int
    batch: int = 1


@dataclass(frozen=True, slots=True)
class _Group:
    """One row group that may hold messages of the stream read."""

    path: str
    index: int
    first_seq: int
    rows_per_batch: int
    group_bytes: int
    """Uncompressed bytes of all its columns (``footers.GroupStats``)."""
    only_messages: bool
    """Its statistics say every row is a message."""


class _CountingFile:
    """A file object counting the bytes read through it (``pa.PythonFile`` wraps it): a
    buffered read of Parquet's asks it to ``read`` into memory of its own; a whole column
    chunk's read, and a footer's, ask for a ``read_buffer`` (the native file's ``Buffer``, no
    copy), which went uncounted while only ``read`` was defined here."""

    def __init__(self, raw: pa.NativeFile, reader: HistoryReader) -> None:
        self._raw = raw
        self._reader = reader

    def read(self, nbytes: int = -1) -> bytes:
        data: bytes = self._raw.read(nbytes)
        self._reader.count(len(data))
        return data

    def read_buffer(self, nbytes: int = -1) -> pa.Buffer:
        data = self._raw.read_buffer(nbytes)
        self._reader.count(data.size)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


@dataclass(slots=True)
class _Cursor:
    """A read in progress: what is left of its plan, the open batch iterator, decoded rows."""

    uid: int
    start: int
    max_bytes: int
    version: int
    """The file index version the plan was made from."""
    plan: deque[str | _Group]
    """Files (paths) not yet opened and row groups not yet read, in order."""
    batches: Iterator[pa.RecordBatch] | None = None
    opened: int = 0
    """Row groups opened by the current read."""
    held: int = 0
    """Bytes the open row group holds undecoded: its column chunks, or a read buffer."""
    only_messages: bool = False
    """The open row group's rows are all messages (its statistics say so)."""
    file: tuple[str, bool, pq.ParquetFile] | None = None
    """The file of the last row group opened (its path, whether read in whole chunks), kept
    open for the next row group of the same file: opening one costs about as much as decoding
    a row group of a few small messages."""
    runs: dict[int, pa.Table] = field(default_factory=dict)
    """Contiguous messages decoded and not yet returned, by first seq."""

    def nbytes(self) -> int:
        return max(self.held, _BUFFER_BYTES) + sum(int(run.nbytes) for run in self.runs.values())


class HistoryReader:
    def __init__(
        self,
        uri: str,
        storage_options: Mapping[str, str],
        *,
        max_parked_bytes: int = 64 << 20,
        max_file_bytes: int = MAX_FILE_BYTES,
    ) -> None:
        self.uri = uri
        self.storage_options = dict(storage_options)
        self.max_parked_bytes = max_parked_bytes
        self.bytes_read = 0
        self.plans = 0
        self.refreshes = 0
        self._lock = threading.Lock()
        self._table: DeltaTable | None = None
        self._files: pa.Table | None = None
        self._version = 0
        """Incremented on every rebuild of the file index."""
        self._footers = FooterCache(self._open, _MAX_FOOTERS)
        self._parked: OrderedDict[tuple[int, int], _Cursor] = OrderedDict()
        self._handler = DeltaStorageHandler(uri, self.storage_options)
        self._local_root = local_root(uri)
        self._sizes: dict[str, int] = {}
        """The size of each data file of the file index (its add action's ``size_bytes``)."""
        self.streams = RowGroupStreams()
        """Which streams each row group of several holds, learned at its first read."""
        self.files = FileBytes(max_file_bytes)
        """Object-store tables: the data files' bytes read, kept for the next reads."""

    def count(self, nbytes: int) -> None:
        with self._lock:
            self.bytes_read += nbytes

    # -- reads --------------------------------------------------------------------------

    def read(self, uid: int, start: int, end: int, max_bytes: int) -> pa.Table:
        """Messages of ``uid`` from ``start`` (before ``end``), whole, each taken while the
        budget ``max_bytes`` is not yet spent and at least one: columns ``HISTORY_COLUMNS``.
        Short of both (``MAX_OPENS_PER_READ``) when the messages are spread over many small files."""
        cursor = self._unpark(uid, start) or self._plan(uid, start, max_bytes)
        cursor.opened = 0
        taken: list[pa.Table] = []
        seq, spent, refreshed, failures = start, 0, False, 0
        while seq < end and (not taken or (spent < max_bytes and cursor.opened < MAX_OPENS_PER_READ)):
            run = cursor.runs.pop(seq, None)
            if run is not None:
                kept, size = within_budget(run["data"].slice(0, end - seq), max_bytes - spent, at_least_one=not taken)
                taken.append(run.slice(0, kept))
                if kept < run.num_rows:
                    cursor.runs[seq + kept] = run.slice(kept)
                seq, spent = seq + kept, spent + size
                continue
            try:
                batch = self._next_batch(cursor, seq)
            except OSError:  # a file of the plan is gone: rewritten by compaction, then vacuumed
                failures += 1
                if failures >= _ATTEMPTS:
                    raise
                cursor = self._plan(uid, seq, max_bytes, refresh=True)
                continue
            if batch is not None:
                add_runs(cursor.runs, batch, uid, seq, only_messages=cursor.only_messages)
                continue
            # The plan is exhausted short of ``end``: the messages were committed after the
            # plan's snapshot. Re-plan on a newer index, refreshing it at most once per read.
            if cursor.version == self._version:
                if refreshed:
                    raise MissingHistory(f"stream uid {uid}: messages from {seq} are missing from the Delta table")
                refreshed = True
            cursor = self._plan(uid, seq, max_bytes, refresh=cursor.version == self._version)
        self._park(cursor, seq)
        return pa.concat_tables(taken) if taken else HISTORY_SCHEMA.empty_table()

    def read_messages(self, uid: int, start: int, end: int) -> list[StoredMessage]:
        """All messages ``start <= seq < end`` of one stream, in order."""
        table = self.read(uid, start, end, max_bytes=1 << 62)
        stamps = table["ts"].cast(pa.int64()).to_pylist()
        metas = table["meta"].to_pylist()
        return [
            StoredMessage(seq, data, ts // 1000, json.loads(meta)["batch"] if meta else 1)
            for seq, data, ts, meta in zip(
                table["seq"].to_pylist(), table["data"].to_pylist(), stamps, metas, strict=True
            )
        ]

    # -- planning -----------------------------------------------------------------------

    def _plan(self, uid: int, start: int, max_bytes: int, *, refresh: bool = False) -> _Cursor:
        """The files that may hold messages of ``uid`` from ``start`` on, by first seq (their
        row groups are chosen when the read reaches them)."""
        with self._lock:
            self.plans += 1
            if refresh or self._files is None:
                self._refresh()
            files, version = self._files, self._version
        assert files is not None
        plan: deque[str | _Group] = deque(message_files(files, uid, start)["path"].to_pylist())
        return _Cursor(uid, start, max_bytes, version, plan)

    def _refresh(self) -> None:
        """(Under the lock.) Re-read the table's log and rebuild the file index."""
        if self._table is None:
            self._table = DeltaTable(self.uri, storage_options=self.storage_options)
        else:
            self._table.update_incremental()
            self.refreshes += 1
        columns = ["path", "size_bytes", "min.stream_uid", "max.stream_uid", "min.seq", "max.seq"]
        self._files = pa.table(self._table.get_add_actions(flatten=True)).select([*columns, "min.kind", "max.kind"])
        self._version += 1
        sizes = dict(zip(self._files["path"].to_pylist(), self._files["size_bytes"].to_pylist(), strict=True))
        if self._local_root is None:  # (a file known by its size opens without a HEAD request)
            handler = DeltaStorageHandler.from_table(self._table._table, self.storage_options, sizes)
            self._handler = cast(DeltaStorageHandler, handler)
        self._sizes = sizes

    def _groups(self, path: str, uid: int, start: int, max_bytes: int) -> list[_Group]:
        """The row groups of a file that may hold messages of ``uid`` from ``start``, by first seq
        (one of several streams only if it holds ``uid``: ``row_group_streams``)."""
        groups = []
        size = self._sizes.get(path)
        for group in message_row_groups(self._footers.row_groups(path, size), uid, start):
            if not group.only_stream and not self.streams.may_hold(
                (path, size, group.index), uid, functools.partial(self._uid_column, path, group.index)
            ):
                continue
            row_bytes = max(1, group.data_bytes // max(1, group.rows))
            rows = min(_MAX_BATCH_ROWS, max(1, max_bytes // row_bytes))
            groups.append(_Group(path, group.index, group.first_seq, rows, group.group_bytes, group.only_messages))
        return sorted(groups, key=lambda group: (group.first_seq, group.index))

    def _uid_column(self, path: str, index: int) -> pa.ChunkedArray:
        """The ``stream_uid`` column of one row group (for ``row_group_streams``)."""
        with self._open(path) as source:
            parquet = pq.ParquetFile(source, metadata=self._footer(path), pre_buffer=False)
            return parquet.read_row_group(index, columns=["stream_uid"], use_threads=False)["stream_uid"]

    def _footer(self, path: str) -> pq.FileMetaData:
        return self._footers.get(path, self._sizes.get(path))

    def _open(self, path: str) -> pa.NativeFile:
        if self._local_root is not None:
            return pa.PythonFile(_CountingFile(open_local(self._local_root, path), self), mode="r")
        handler = self._handler._handler
        return self.files.open(path, self._sizes.get(path), lambda: handler.open_input_file(path), self.count)

    def _next_batch(self, cursor: _Cursor, seq: int) -> pa.RecordBatch | None:
        """The next batch of the plan; ``None`` once it is exhausted."""
        while True:
            if cursor.batches is not None:
                batch = next(cursor.batches, None)
                if batch is not None:
                    return batch
                cursor.batches, cursor.held = None, 0
            if not cursor.plan:
                return None
            item = cursor.plan.popleft()
            if isinstance(item, str):  # a file: its row groups come next
                cursor.plan.extendleft(reversed(self._groups(item, cursor.uid, seq, cursor.max_bytes)))
                continue
            cursor.opened += 1
            whole = item.group_bytes <= WHOLE_GROUP_BYTES  # (buffer size 0: each column chunk read whole)
            cursor.held = item.group_bytes if whole else _BUFFER_BYTES
            cursor.only_messages = item.only_messages
            if cursor.file is None or cursor.file[:2] != (item.path, whole):
                parquet = pq.ParquetFile(
                    self._open(item.path),
                    metadata=self._footer(item.path),
                    buffer_size=0 if whole else _BUFFER_BYTES,
                    pre_buffer=False,
                )
                cursor.file = (item.path, whole, parquet)
            cursor.batches = cursor.file[2].iter_batches(
                batch_size=item.rows_per_batch, row_groups=[item.index], columns=_READ_COLUMNS, use_threads=False
            )

    # -- parked cursors -----------------------------------------------------------------

    def _unpark(self, uid: int, seq: int) -> _Cursor | None:
        with self._lock:
            return self._parked.pop((uid, seq), None)

    def _park(self, cursor: _Cursor, seq: int) -> None:
        if cursor.batches is None and not cursor.plan and not cursor.runs:
            return
        with self._lock:
            self._parked[(cursor.uid, seq)] = cursor
            parked = sum(each.nbytes() for each in self._parked.values())
            while parked > self.max_parked_bytes and self._parked:
                _, dropped = self._parked.popitem(last=False)
                parked -= dropped.nbytes()

    def forget(self, uid: int) -> None:
        """Drop the parked cursors of a stream incarnation (it was removed)."""
        with self._lock:
            for key in [key for key in self._parked if key[0] == uid]:
                del self._parked[key]

    @property
    def parked_bytes(self) -> int:
        with self._lock:
            return sum(cursor.nbytes() for cursor in self._parked.values())
