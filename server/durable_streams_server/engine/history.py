"""The history cache: messages read from Delta, kept for the next read of the same place.

A read below a stream's memory tail reads about its budget from Delta
(``storage.history_reader``), and the history reader resumes a sequential read where the
previous one stopped. What this cache adds is the repeated read of one place: a large
message served in slices (each slice re-reads the message's offset), a retried response,
several readers at the same offset. Its entries are held in the engine's memory budget
(``memory``), which may let any of them go; ``max_bytes`` caps the cache on its own.

Caching is safe because history is immutable: the messages below the memory tail of one
incarnation (uid) of a stream never change. Retention only removes old ones, and reads
below the retained start are answered 410 before anything is gathered, so a cached copy of
a purged message is never served. Entries are evicted least recently used, by bytes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

import pyarrow as pa

from .memory import MemoryBudget


class HistoryCache:
    def __init__(self, max_bytes: int, memory: MemoryBudget | None = None) -> None:
        self.max_bytes = max_bytes
        self.memory = memory or MemoryBudget(0)
        self._entries: OrderedDict[tuple[int, int], pa.Table] = OrderedDict()
        """(uid, first seq) -> a read's messages (``seq``, ``data``, ``ts``), consecutive."""
        self._bytes = 0
        self._release = self._let_go  # (bound once: ``memory`` keeps one function per kind of entry)

    def get(self, uid: int, seq: int) -> pa.Table | None:
        """The cached messages of ``uid`` from ``seq`` on, if a scan covered ``seq``."""
        for key, table in self._entries.items():
            if key[0] == uid and key[1] <= seq < key[1] + table.num_rows:
                self._entries.move_to_end(key)
                self.memory.touch(("history", *key))
                return table.slice(seq - key[1])
        return None

    def put(self, uid: int, table: pa.Table) -> None:
        if not self.max_bytes or not table.num_rows or table.nbytes > self.max_bytes:
            return
        key = (uid, table["seq"][0].as_py())
        self._forget(key)
        self._entries[key] = table
        self._bytes += table.nbytes
        while self._bytes > self.max_bytes:
            self._forget(next(iter(self._entries)))
        if key in self._entries:
            self.memory.hold(("history", *key), table.nbytes, self._release)

    def _let_go(self, held: Hashable) -> None:
        assert isinstance(held, tuple)
        self._forget((held[1], held[2]), held=False)

    def _forget(self, key: tuple[int, int], *, held: bool = True) -> None:
        table = self._entries.pop(key, None)
        if table is not None:
            self._bytes -= table.nbytes
            if held:
                self.memory.drop(("history", *key))
