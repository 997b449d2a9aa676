"""Parquet footers of the table's data files, cached (data files are immutable), least
recently used dropped beyond ``max_entries`` or ``max_bytes``. Thread-safe; ``get`` blocks
on a miss. A footer is cached by the file's path and, where the caller knows it (the add
action's ``size_bytes``), its size: it serves every later read of the file, across requests
and table versions (files are written once under unique names, never rewritten: compaction
writes new ones), and a file of another size under the same path would be read anew.

``message_row_groups`` reads what a footer's statistics say of one stream's messages, and
``message_files`` what the Delta log's statistics of each file say (history reads and read
plans both choose files and row groups with them).

A footer's size is counted as its serialized bytes; decoded, pyarrow's ``FileMetaData`` takes
several times that (~1.5 MiB for a 200 KB footer of ~160 row groups), so ``max_bytes`` keeps
the cache to tens of MiB however many files a table has before compaction.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .table_schema import KIND_MESSAGE

MAX_FOOTER_BYTES = 8 * 1024 * 1024


class FooterCache:
    def __init__(
        self, open_file: Callable[[str], pa.NativeFile], max_entries: int = 4096, max_bytes: int = MAX_FOOTER_BYTES
    ) -> None:
        self._open = open_file
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._footers: OrderedDict[str, _Footer] = OrderedDict()
        self._bytes = 0

    def get(self, path: str, size: int | None = None) -> pq.FileMetaData:
        """The footer of the file at ``path`` of ``size`` bytes (``None``: whatever its size)."""
        return self._entry(path, size).metadata

    def row_groups(self, path: str, size: int | None = None) -> RowGroupStats:
        """The file's row-group statistics, decoded once (``message_row_groups`` reads them)."""
        entry = self._entry(path, size)
        if entry.stats is None:
            stats = RowGroupStats.of(entry.metadata)
            with self._lock:
                if entry.stats is None and self._footers.get(path) is entry:
                    self._bytes += stats.nbytes
                    self._evict()
                entry.stats = stats
        return entry.stats

    def _entry(self, path: str, size: int | None) -> _Footer:
        with self._lock:
            entry = self._footers.get(path)
            if entry is not None and entry.matches(size):
                self._footers.move_to_end(path)
                return entry
        metadata = pq.read_metadata(self._open(path))
        with self._lock:
            entry = self._footers.get(path)
            if entry is None or not entry.matches(size):
                if entry is not None:
                    self._bytes -= self._footers.pop(path).nbytes
                entry = self._footers[path] = _Footer(metadata, size)
                self._bytes += metadata.serialized_size
            self._evict()
        return entry

    def _evict(self) -> None:
        """(Under the lock.) Drop the least recently used beyond the bounds (never the newest)."""
        while len(self._footers) > 1 and (len(self._footers) > self.max_entries or self._bytes > self.max_bytes):
            _, dropped = self._footers.popitem(last=False)
            self._bytes -= dropped.nbytes

    @property
    def nbytes(self) -> int:
        """Serialized bytes of the footers held (and of their decoded row-group statistics)."""
        with self._lock:
            return self._bytes


class _Footer:
    __slots__ = ("metadata", "size", "stats")

    def __init__(self, metadata: pq.FileMetaData, size: int | None) -> None:
        self.metadata = metadata
        self.size = size
        """The file's size where the caller knew it (its add action's ``size_bytes``)."""
        self.stats: RowGroupStats | None = None

    def matches(self, size: int | None) -> bool:
        """Whether this is the footer of a file of ``size`` bytes (as far as either knows)."""
        return size is None or self.size is None or size == self.size

    @property
    def nbytes(self) -> int:
        return int(self.metadata.serialized_size) + (self.stats.nbytes if self.stats is not None else 0)


@dataclass(frozen=True, slots=True)
class GroupStats:
    """A row group that may hold messages of the stream asked for, as its statistics say."""

    index: int
    first_seq: int
    """Its smallest ``seq`` (0 where unknown)."""
    last_seq: int
    """Its largest ``seq`` (``1 << 62`` where unknown)."""
    rows: int
    data_bytes: int
    """Uncompressed bytes of its ``data`` column."""
    group_bytes: int
    """Uncompressed bytes of all its columns (about what reading its column chunks whole holds)."""
    only_stream: bool
    """Every row is the stream's (``stream_uid`` min = max = the uid asked for)."""
    only_messages: bool
    """Every row is a message (``kind`` min = max = ``message``)."""


_UNKNOWN_SEQ = 1 << 62


@dataclass(frozen=True, slots=True)
class RowGroupStats:
    """What a file's footer says of its row groups, one numpy array a column (decoded once:
    reading pyarrow's statistics objects costs microseconds a row group, every time)."""

    uid_min: np.ndarray
    """``stream_uid`` minimum (``-1`` where unknown, with ``uid_max`` ``1 << 62``: any stream)."""
    uid_max: np.ndarray
    uid_known: np.ndarray
    messages: np.ndarray
    """Whether the ``kind`` statistics allow messages (true where unknown)."""
    only_messages: np.ndarray
    """Whether they allow nothing else (false where unknown)."""
    seq_min: np.ndarray
    """``seq`` minimum (0 where unknown); ``seq_max`` ``1 << 62`` where unknown."""
    seq_max: np.ndarray
    rows: np.ndarray
    data_bytes: np.ndarray
    group_bytes: np.ndarray
    ts_min: np.ndarray
    """``ts`` minimum in microseconds since the epoch (``-(1 << 62)`` where unknown); ``ts_max``
    ``1 << 62`` where unknown (``time_index`` finds a timestamp's first offset with them)."""
    ts_max: np.ndarray

    @classmethod
    def of(cls, metadata: pq.FileMetaData) -> RowGroupStats:
        names = metadata.schema.names
        uid_column, seq_column, kind_column = names.index("stream_uid"), names.index("seq"), names.index("kind")
        data_column, ts_column = names.index("data"), names.index("ts")
        columns: list[list[int]] = [[] for _ in range(12)]
        for index in range(metadata.num_row_groups):
            group = metadata.row_group(index)
            uids, seqs = group.column(uid_column).statistics, group.column(seq_column).statistics
            kinds, stamps = group.column(kind_column).statistics, group.column(ts_column).statistics
            known_stamps = stamps is not None and stamps.has_min_max
            known_uids = uids is not None and uids.has_min_max
            known_seqs = seqs is not None and seqs.has_min_max
            known_kinds = kinds is not None and kinds.has_min_max
            messages = not known_kinds or _text(kinds.min) <= KIND_MESSAGE <= _text(kinds.max)
            only_messages = known_kinds and _text(kinds.min) == KIND_MESSAGE == _text(kinds.max)
            row = (
                int(uids.min) if known_uids else -1,
                int(uids.max) if known_uids else _UNKNOWN_SEQ,
                known_uids,
                messages,
                only_messages,
                int(seqs.min) if known_seqs else 0,
                int(seqs.max) if known_seqs else _UNKNOWN_SEQ,
                group.num_rows,
                group.column(data_column).total_uncompressed_size,
                group.total_byte_size,
                int(stamps.min_raw) if known_stamps else -_UNKNOWN_SEQ,
                int(stamps.max_raw) if known_stamps else _UNKNOWN_SEQ,
            )
            for column, value in zip(columns, row, strict=True):
                column.append(int(value))
        as_bool = (2, 3, 4)
        return cls(*(np.array(c, dtype=bool if i in as_bool else np.int64) for i, c in enumerate(columns)))

    @property
    def nbytes(self) -> int:
        return sum(int(getattr(self, name).nbytes) for name in self.__slots__)


def message_row_groups(stats: RowGroupStats, uid: int, first: int, end: int = _UNKNOWN_SEQ) -> list[GroupStats]:
    """The row groups whose statistics allow messages of ``uid`` with ``first <= seq < end``,
    in file order (a row group without statistics is kept: it may hold anything)."""
    keep = (stats.uid_min <= uid) & (uid <= stats.uid_max) & stats.messages
    keep &= (stats.seq_max >= first) & (stats.seq_min < end)
    exact = stats.uid_known & (stats.uid_min == uid) & (stats.uid_max == uid)
    return [
        GroupStats(
            int(i),
            int(stats.seq_min[i]),
            int(stats.seq_max[i]),
            int(stats.rows[i]),
            int(stats.data_bytes[i]),
            int(stats.group_bytes[i]),
            bool(exact[i]),
            bool(stats.only_messages[i]),
        )
        for i in np.flatnonzero(keep)
    ]


def message_files(files: pa.Table, uid: int, first: int, end: int = 1 << 62) -> pa.Table:
    """The rows of ``files`` (the table's add actions, flattened: ``path``, ``min.stream_uid``,
    ``max.seq`` ...) whose statistics allow messages of ``uid`` with ``first <= seq < end``,
    by first seq (a file without statistics is kept)."""
    mask = pc.and_(
        pc.and_(pc.less_equal(files["min.stream_uid"], uid), pc.greater_equal(files["max.stream_uid"], uid)),
        pc.and_(pc.less_equal(files["min.kind"], KIND_MESSAGE), pc.greater_equal(files["max.kind"], KIND_MESSAGE)),
    )
    mask = pc.and_(mask, pc.and_(pc.greater_equal(files["max.seq"], first), pc.less(files["min.seq"], end)))
    return files.filter(pc.fill_null(mask, True)).sort_by([("min.seq", "ascending"), ("path", "ascending")])


def _text(value: object) -> str:
    """A string column's statistic (files delta-rs rewrote may give ``bytes``)."""
    return value.decode() if isinstance(value, bytes) else str(value)
