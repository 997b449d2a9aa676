"""Parquet footers of the table's data files, cached (data files are immutable), least
recently used dropped beyond ``max_entries`` or ``max_bytes``. Thread-safe; ``get`` blocks
on a miss.

A footer's size is counted as its serialized bytes; decoded, pyarrow's ``FileMetaData`` takes
several times that (~1.5 MiB for a 200 KB footer of ~160 row groups), so ``max_bytes`` keeps
the cache to tens of MiB however many files a table has before compaction.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

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
