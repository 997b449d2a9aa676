"""Read-ahead for history: Delta scans that serve the next sequential read too.

A read below a stream's memory tail costs a Delta scan: a few milliseconds of opening and
decoding files, whatever the size of the answer. A catch-up reader or a Spark partition
walks history one response at a time, so each scan reads ahead of the response it serves
and keeps the rest here for the next one.

Caching is safe because history is immutable: the messages below the memory tail of one
incarnation (uid) of a stream never change. Retention only removes old ones, and reads
below the retained start are answered 410 before anything is gathered, so a cached copy of
a purged message is never served. Entries are evicted least recently used, by bytes.
"""

from __future__ import annotations

from collections import OrderedDict

import pyarrow as pa


class HistoryCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, int], pa.Table] = OrderedDict()
        """(uid, first seq) -> a scan's messages (``seq``, ``data``, ``ts``), consecutive."""
        self._bytes = 0

    def get(self, uid: int, seq: int) -> pa.Table | None:
        """The cached messages of ``uid`` from ``seq`` on, if a scan covered ``seq``."""
        for key, table in self._entries.items():
            if key[0] == uid and key[1] <= seq < key[1] + table.num_rows:
                self._entries.move_to_end(key)
                return table.slice(seq - key[1])
        return None

    def put(self, uid: int, table: pa.Table) -> None:
        if not self.max_bytes or not table.num_rows or table.nbytes > self.max_bytes:
            return
        key = (uid, table["seq"][0].as_py())
        previous = self._entries.pop(key, None)
        if previous is not None:
            self._bytes -= previous.nbytes
        self._entries[key] = table
        self._bytes += table.nbytes
        while self._bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.nbytes
