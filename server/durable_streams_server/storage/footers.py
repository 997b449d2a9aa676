"""Parquet footers of the table's data files, cached (data files are immutable), least
recently used dropped beyond ``max_entries``. Thread-safe; ``get`` blocks on a miss."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq


class FooterCache:
    def __init__(self, open_file: Callable[[str], pa.NativeFile], max_entries: int = 4096) -> None:
        self._open = open_file
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._footers: OrderedDict[str, pq.FileMetaData] = OrderedDict()

    def get(self, path: str) -> pq.FileMetaData:
        with self._lock:
            metadata = self._footers.get(path)
            if metadata is not None:
                self._footers.move_to_end(path)
                return metadata
        metadata = pq.read_metadata(self._open(path))
        with self._lock:
            self._footers[path] = metadata
            while len(self._footers) > self.max_entries:
                self._footers.popitem(last=False)
        return metadata
