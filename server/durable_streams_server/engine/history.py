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

A catch-up also finds its next response here: ``ReadAhead`` reads it while the last one is
sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Hashable

import pyarrow as pa

from .memory import MemoryBudget
from .ports import StoragePort

log = logging.getLogger("durable_streams_server.engine")


class HistoryCache:
    def __init__(self, max_bytes: int, memory: MemoryBudget | None = None) -> None:
        self.max_bytes = max_bytes
        self.memory = memory or MemoryBudget(0)
        self._entries: OrderedDict[tuple[int, int], tuple[pa.Table, int]] = OrderedDict()
        """(uid, first seq) -> a read's messages (``seq``, ``data``, ``ts``), consecutive, and their
        bytes (``Table.nbytes`` walks every chunk's buffers: counted once, at ``put``)."""
        self._starts: dict[int, set[int]] = {}
        """Each uid's first seqs among ``_entries``: a lookup looks at its stream's entries only
        (the cache may hold hundreds of thousands of small reads of as many streams)."""
        self._bytes = 0
        self._release = self._let_go  # (bound once: ``memory`` keeps one function per kind of entry)

    def get(self, uid: int, seq: int) -> pa.Table | None:
        """The cached messages of ``uid`` from ``seq`` on, if a scan covered ``seq``."""
        for start in self._starts.get(uid, ()):
            table = self._entries[(uid, start)][0]
            if start <= seq < start + table.num_rows:
                self._entries.move_to_end((uid, start))
                self.memory.touch(("history", uid, start))
                return table.slice(seq - start)
        return None

    def covers(self, uid: int, seq: int) -> bool:
        """Whether ``get(uid, seq)`` would find messages (without using them)."""
        return any(
            start <= seq < start + self._entries[(uid, start)][0].num_rows for start in self._starts.get(uid, ())
        )

    def put(self, uid: int, table: pa.Table) -> None:
        if not self.max_bytes or not table.num_rows:
            return
        size = table.nbytes
        if size > self.max_bytes:
            return
        key = (uid, table["seq"][0].as_py())
        self._forget(key)
        self._entries[key] = (table, size)
        self._starts.setdefault(uid, set()).add(key[1])
        self._bytes += size
        while self._bytes > self.max_bytes:
            self._forget(next(iter(self._entries)))
        if key in self._entries:
            self.memory.hold(("history", *key), size, self._release)

    def _let_go(self, held: Hashable) -> None:
        assert isinstance(held, tuple)
        self._forget((held[1], held[2]), held=False)

    def _forget(self, key: tuple[int, int], *, held: bool = True) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            starts = self._starts[key[0]]
            starts.discard(key[1])
            if not starts:
                del self._starts[key[0]]
            self._bytes -= entry[1]
            if held:
                self.memory.drop(("history", *key))


MAX_AHEAD = 2
"""Reads ahead in flight at once, over all streams."""
_TRACKED = 4096
"""Streams whose last history read's end is kept, to tell a sequential read (``ReadAhead``)."""


class ReadAhead:
    """The next response of a catch-up read from Delta while this one is sent.

    A reader catching up on history asks for a response, receives it, and asks for the next
    one from where it ended: decoding (a storage thread), writing and receiving take turns,
    each waiting for the others. So when a history read filled its budget and history is left
    below the memory tail, and the read was sequential (it started where the stream's last
    history read ended, or at the stream's first retained message), the next budget's worth is
    read at once on a storage thread, from the cursor the read parked (``storage.history_reader``),
    into the cache above. The reader's next request finds it there; one that arrives while it is
    still being read waits for it rather than reading the same rows again (``arrived``). Nothing
    is read ahead that the cache already holds.

    A read ahead is a guess, never a reason to delay a request: at most ``MAX_AHEAD`` at once,
    one per stream, each reserving its budget from the memory budget and skipped when that is
    not granted at once; what it read is held in the cache, and let go, as any read's result.
    History below the memory tail is immutable, so what it read is what the request would have
    read itself (``_history`` in ``reads`` slices it as it slices its own read).
    """

    def __init__(self, storage: StoragePort, cache: HistoryCache, max_ahead: int = MAX_AHEAD) -> None:
        self.storage = storage
        self.cache = cache
        self.max_ahead = max_ahead
        self._reading: dict[tuple[int, int], asyncio.Task[None]] = {}
        """(uid, first seq) -> the read ahead in flight."""
        self._ends: OrderedDict[int, int] = OrderedDict()
        """uid -> where its last history read ended (the most recent ``_TRACKED``)."""
        self.started = 0
        """Reads ahead started so far (metrics)."""

    async def arrived(self, uid: int, seq: int) -> None:
        """A read of ``uid`` from ``seq`` is about to look in the cache: if a read ahead of that
        place is in flight, its result first."""
        task = self._reading.get((uid, seq))
        if task is not None:
            await asyncio.shield(task)  # (a request cancelled meanwhile leaves the read ahead be)

    def follow(self, uid: int, start: int, end: int, stop: int, budget: int, *, first: bool) -> None:
        """A history read of ``uid`` took ``start..end`` (of history below ``stop``) with
        ``budget``, and filled it; ``first``: it started at the stream's first retained message."""
        sequential = self._ends.pop(uid, None) == start or first
        self._ends[uid] = end
        if len(self._ends) > _TRACKED:
            self._ends.popitem(last=False)
        if (
            not sequential
            or end >= stop
            or len(self._reading) >= self.max_ahead
            or budget > self.cache.max_bytes
            or any(key[0] == uid for key in self._reading)
            or self.cache.covers(uid, end)
        ):
            return
        reserved = self.cache.memory.reserve_now(budget)
        if reserved is None:
            return
        self.started += 1
        self._reading[(uid, end)] = asyncio.get_running_loop().create_task(self._read(uid, end, stop, budget, reserved))

    async def _read(self, uid: int, start: int, stop: int, budget: int, reserved: int) -> None:
        try:
            self.cache.put(uid, await self.storage.read_history(uid, start, stop, budget))
        except Exception:  # (the request reads it itself, and meets the error there if it lasts)
            log.debug("a read ahead failed", exc_info=True, extra={"uid": uid, "seq": start})
        finally:
            self.cache.memory.release(reserved)
            del self._reading[(uid, start)]

    async def close(self) -> None:
        for task in list(self._reading.values()):
            task.cancel()
        await asyncio.gather(*self._reading.values(), return_exceptions=True)
