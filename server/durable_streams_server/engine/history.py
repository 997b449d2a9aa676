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
        self._starts: dict[int, set[int]] = {}
        """Each uid's first seqs among ``_entries``: a lookup looks at its stream's entries only
        (the cache may hold hundreds of thousands of small reads of as many streams)."""
        self._bytes = 0
        self._release = self._let_go  # (bound once: ``memory`` keeps one function per kind of entry)

    def get(self, uid: int, seq: int) -> pa.Table | None:
        """The cached messages of ``uid`` from ``seq`` on, if a scan covered ``seq``."""
        for start in self._starts.get(uid, ()):
            table = self._entries[(uid, start)]
            if start <= seq < start + table.num_rows:
                self._entries.move_to_end((uid, start))
                self.memory.touch(("history", uid, start))
                return table.slice(seq - start)
        return None

    def put(self, uid: int, table: pa.Table) -> None:
        if not self.max_bytes or not table.num_rows or table.nbytes > self.max_bytes:
            return
        key = (uid, table["seq"][0].as_py())
        self._forget(key)
        self._entries[key] = table
        self._starts.setdefault(uid, set()).add(key[1])
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
            starts = self._starts[key[0]]
            starts.discard(key[1])
            if not starts:
                del self._starts[key[0]]
            self._bytes -= table.nbytes
            if held:
                self.memory.drop(("history", *key))
