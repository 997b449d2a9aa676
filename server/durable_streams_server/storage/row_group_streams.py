"""Which streams each row group of the table's data files holds, learned once per row group.

A row group's ``stream_uid`` statistics are a range, and before compaction a flush file's row
groups each hold many streams: with appends spread over many streams, every recent flush
file's range spans nearly every uid, so a read of a stream that went cold decoded one row
group of every such file to find it in one or two (with 100,000 streams, ~27 files: ~5.5 ms
for one 100-byte message). Parquet has no membership index pyarrow reads (its bloom filters
are not exposed), so the reader learns one: the first time a row group of several streams
is a candidate, its ``stream_uid`` column alone is decoded (8 bytes a row, no message bytes)
and its distinct uids kept, sorted; from then on a read skips the row group unless the uid
is among them (a binary search).

* **Always correct**: data files are immutable (written once under a unique name, never
  rewritten in place), so a row group's uids never change; entries are keyed by the file's
  path, its size (where known) and the row group's index. The uids are those of every row,
  whatever its kind, so the answer errs only towards reading (a ``state`` row's uid is a
  false positive: the read filters its rows anyway).
* **Bounded** by ``max_bytes`` of uid arrays, least recently used dropped first (not counted
  in the engine's ``--memory-budget``, like the footers beside it). A row group whose
  distinct uids alone would take more than an eighth of it is not kept: its next read
  learns it again, as every read did before.
* **Thread-safe**; two reads missing the same row group may both decode its column (the
  same answer).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import pyarrow as pa

MAX_BYTES = 4 << 20
"""Bytes of uid arrays kept (~half a million distinct uids over all row groups)."""

_Key = tuple[str, int | None, int]
"""A row group: its file's path, the file's size (``None``: not known) and its index."""


class RowGroupStreams:
    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.learned = 0
        """Row groups whose uid column was decoded (a miss)."""
        self._lock = threading.Lock()
        self._uids: OrderedDict[_Key, np.ndarray] = OrderedDict()
        self._bytes = 0

    def may_hold(self, key: _Key, uid: int, uid_column: Callable[[], pa.ChunkedArray | pa.Array]) -> bool:
        """Whether the row group ``key`` may hold rows of ``uid``; ``uid_column()`` decodes its
        ``stream_uid`` column the first time (it blocks on the file)."""
        with self._lock:
            uids = self._uids.get(key)
            if uids is not None:
                self._uids.move_to_end(key)
        if uids is None:
            uids = self._learn(key, uid_column())
            if uids is None:
                return True
        at = int(np.searchsorted(uids, uid))
        return at < len(uids) and int(uids[at]) == uid

    def _learn(self, key: _Key, column: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
        """The sorted distinct uids of a row group's column (kept if they fit); ``None`` if it
        has nulls (a file written elsewhere: any row may be any stream's)."""
        if column.null_count:
            return None
        values = column.to_numpy() if isinstance(column, pa.ChunkedArray) else column.to_numpy(zero_copy_only=False)
        uids = np.unique(values.astype(np.int64, copy=False))  # (sorted: a binary search finds a uid)
        with self._lock:
            self.learned += 1
            if uids.nbytes <= self.max_bytes // 8 and key not in self._uids:
                self._uids[key] = uids
                self._bytes += uids.nbytes
                while self._bytes > self.max_bytes:
                    _, dropped = self._uids.popitem(last=False)
                    self._bytes -= dropped.nbytes
        return uids

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._bytes
