"""Parquet footers of the table's data files, cached (data files are immutable), least
recently used dropped beyond ``max_entries`` or ``max_bytes``. Thread-safe; ``get`` blocks
on a miss. ``message_row_groups`` reads what a footer's statistics say of one stream's
messages, and ``message_files`` what the Delta log's statistics of each file say (history
reads and read plans both choose files and row groups with them).

A footer's size is counted as its serialized bytes; decoded, pyarrow's ``FileMetaData`` takes
several times that (~1.5 MiB for a 200 KB footer of ~160 row groups), so ``max_bytes`` keeps
the cache to tens of MiB however many files a table has before compaction.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

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
        self._footers: OrderedDict[str, pq.FileMetaData] = OrderedDict()
        self._bytes = 0

    def get(self, path: str) -> pq.FileMetaData:
        with self._lock:
            metadata = self._footers.get(path)
            if metadata is not None:
                self._footers.move_to_end(path)
                return metadata
        metadata = pq.read_metadata(self._open(path))
        with self._lock:
            if path not in self._footers:
                self._footers[path] = metadata
                self._bytes += metadata.serialized_size
            while len(self._footers) > 1 and (len(self._footers) > self.max_entries or self._bytes > self.max_bytes):
                _, dropped = self._footers.popitem(last=False)
                self._bytes -= dropped.serialized_size
        return metadata

    @property
    def nbytes(self) -> int:
        """Serialized bytes of the footers held."""
        with self._lock:
            return self._bytes


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
    only_stream: bool
    """Every row is the stream's (``stream_uid`` min = max = the uid asked for)."""


def message_row_groups(metadata: pq.FileMetaData, uid: int, first: int, end: int = 1 << 62) -> list[GroupStats]:
    """The row groups whose statistics allow messages of ``uid`` with ``first <= seq < end``,
    in file order (a row group without statistics is kept: it may hold anything)."""
    names = metadata.schema.names
    uid_column, seq_column, kind_column = names.index("stream_uid"), names.index("seq"), names.index("kind")
    data_column = names.index("data")
    found = []
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        uids, seqs = group.column(uid_column).statistics, group.column(seq_column).statistics
        kinds = group.column(kind_column).statistics
        known_uids = uids is not None and uids.has_min_max
        if known_uids and not uids.min <= uid <= uids.max:
            continue
        if kinds is not None and kinds.has_min_max and not _text(kinds.min) <= KIND_MESSAGE <= _text(kinds.max):
            continue  # (other kinds only: a flush's state rows, the end of a compacted file)
        lo, hi = (seqs.min, seqs.max) if seqs is not None and seqs.has_min_max else (0, 1 << 62)
        if hi < first or lo >= end:
            continue
        data_bytes = group.column(data_column).total_uncompressed_size
        exact = known_uids and uids.min == uids.max == uid
        found.append(GroupStats(index, int(lo), int(hi), group.num_rows, data_bytes, exact))
    return found


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
