"""Where the engine finds a stream, by path or by uid, including the streams a restart has not
parsed yet and those put back to sleep.

Recovery hands the engine the newest state of every live stream. Most streams are idle, so
parsing every state at start makes a restart cost what the server ever kept (300,000 streams
took 14 s). Instead, storage leaves the states of ordinary live streams unparsed
(``storage.state_rows``: *dormant*), and this index keeps them *cold* (``cold_streams``:
columns, no Python object per stream) until the first time anything looks one up, by path
(a request) or by uid (a replayed WAL record, a fork's link to its source), which builds its
``Stream``.

A built stream can also go back to sleep (``sleep``, by the engine's ``idle.IdleStreams``):
its state kept cold as JSON, no ``Stream`` (and nothing for the cyclic collector to scan,
``collector.py``) until it is used again, exactly as a stream restored dormant. Only a
stream nothing else refers to sleeps: no request, reader, cache entry or queue holds its
``Stream`` (its reference count says so), so no one can go on using an object the index
has let go while the next lookup builds another.

``by_name`` and ``by_uid`` are two mapping views of one index. Lookups (``[]``, ``get``)
wake a cold stream; membership tests (``in``) and ``len`` do not. Iterating ``values`` or
``items`` wakes every cold stream (rare paths only); ``loaded`` iterates only the streams
built now, which are all that per-stream work in the background needs, since every
stream whose state matters before use (buckets, forks, soft-deleted streams, retention
points, tombstones) is parsed at recovery and never sleeps.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Generic, TypeVar

import pyarrow as pa

from ..storage.state_rows import DORMANT, DormantStates, state_flags
from .cold_streams import ColdStreams, state_json
from .cold_tails import ColdTails
from .name_snapshots import NameSnapshot
from .stream import Stream
from .stream_facts import StreamFacts

_K = TypeVar("_K", str, int)
_UNREFERENCED = 4
"""``sys.getrefcount`` of a built stream in ``sleep`` that nothing else refers to: the two
maps, ``sleep``'s own variable, and ``getrefcount``'s argument."""


class StreamIndex:
    def __init__(self) -> None:
        self._by_name: dict[str, Stream] = {}
        self._by_uid: dict[int, Stream] = {}
        self._cold = ColdStreams()
        self.cold_tails = ColdTails()
        """What the streams appended to asleep keep until their records are in Delta (``cold_tails``)."""
        self._recovered_ms = 0
        self.on_wake: Callable[[Stream], None] = _nothing
        """Called with each stream built from its cold state, before its ``ColdTail`` is adopted
        (``TailCaches``: the cached tail it had asleep)."""
        self.by_name: _View[str] = _View(self, self._by_name, self._cold_uid_at, self._cold_names)
        self.by_uid: _View[int] = _View(self, self._by_uid, self._cold_uid, self._cold_uids)

    def hold(self, dormant: DormantStates, recovered_ms: int) -> None:
        """Keep ``dormant`` (at recovery, after the parsed streams are in) until each is used.
        A dormant stream whose path a parsed one also holds (a soft-deleted incarnation) is
        woken now, so the newer incarnation takes the path as it did before."""
        self._cold = ColdStreams.of(dormant)
        self._recovered_ms = recovered_ms
        for name in list(self._by_name):
            uid = self._cold.uid_of(name)
            if uid is not None:
                self._wake(uid)

    def loaded(self) -> list[Stream]:
        """The streams built so far (not the cold ones), by uid order of creation."""
        return list(self._by_uid.values())

    def names(self) -> Iterator[str]:
        """Every path, cold ones included, without waking any."""
        yield from list(self._by_name)
        yield from self._cold.names()

    def name_snapshot(self) -> NameSnapshot:
        """Every path, cold ones included, to be made into Arrow on any thread (``name_snapshots``)."""
        return self._cold.take_names(list(self._by_name))

    def name_column(self) -> pa.ChunkedArray:
        """Every path, cold ones included, as Arrow (no Python string per cold stream)."""
        return self.name_snapshot().column()

    def rebuild_names(self) -> None:
        """Re-point every built stream's path at its newest incarnation (after recovery)."""
        self._by_name.clear()
        self._by_name.update((stream.name, stream) for stream in self._by_uid.values())

    @property
    def dormant(self) -> int:
        """Streams not built: restored dormant, or put to sleep since."""
        return len(self._cold)

    @property
    def awake(self) -> int:
        """Streams built now."""
        return len(self._by_uid)

    def built(self, uid: int) -> Stream | None:
        """The stream ``uid`` if it is built now (a cold one stays so)."""
        return self._by_uid.get(uid)

    def look(self, name: str) -> Stream | dict[str, Any] | None:
        """The stream at ``name`` without building it: the built ``Stream``, else the cold
        one's state, parsed (for a look that must not wake it: ``consumers``' lag). A stream
        appended to asleep whose messages are not all in Delta yet is built (``cold_tails``):
        its state alone would tell of messages not yet durable, or not yet readable from Delta."""
        stream = self._by_name.get(name)
        if stream is not None:
            return stream
        uid = self._cold.uid_of(name)
        if uid is None:
            return None
        if uid in self.cold_tails:  # (appended asleep, not all in Delta yet: built, it reads them from memory)
            return self._wake(uid)
        return self._cold.peek(uid, name)

    def facts(self, name: str) -> StreamFacts | None:
        """What ``look`` tells of the stream at ``name`` (``stream_facts``), building none that
        ``look`` would not."""
        return StreamFacts.of(self.look(name))

    def live_tail(self, name: str) -> int | None:
        """The visible tail of the live stream at ``name`` (``None``: none, or soft-deleted), the
        built stream's read at once: what a subscription's deliveries ask of every linked stream."""
        stream = self._by_name.get(name)
        if stream is not None:
            return None if stream.soft_deleted else stream.visible_tail
        facts = self.facts(name)
        return facts.tail if facts is not None and facts.live else None

    @property
    def recovered_ms(self) -> int:
        """When recovery ended: access times persisted before are taken as this late (``_wake``)."""
        return self._recovered_ms

    def cold_state(self, name: str) -> tuple[int, dict[str, Any]] | None:
        """The uid and state of the stream asleep at ``name``, parsed (its ``ColdTail``'s own, which
        the caller may change only to the state it stores next); ``None``: none is asleep there
        (none is, or it is built). It stays asleep."""
        if name in self._by_name:
            return None
        uid = self._cold.uid_of(name)
        if uid is None:
            return None
        pending = self.cold_tails.get(uid)
        state = pending.state if pending is not None else self._cold.peek(uid, name)
        return None if state is None else (uid, state)

    def asleep_state(self, uid: int) -> dict[str, Any] | None:
        """The state of the stream ``uid`` if it is asleep, parsed (for a flush: a copy of its own);
        it stays asleep."""
        pending = self.cold_tails.get(uid)
        return dict(pending.state) if pending is not None else self._cold.peek(uid)

    def keep_asleep(self, name: str, uid: int, state: dict[str, Any]) -> None:
        """The stream ``uid`` asleep at ``name`` has ``state`` now (``cold_appends``)."""
        self._cold.replace(name, uid, state_json(state))

    def built_uids(self) -> list[int]:
        """The uids of the streams built now (``IdleStreams`` goes through them in turns)."""
        return list(self._by_uid)

    def sleep(self, uid: int) -> bool:
        """Let the built stream ``uid`` go, keeping its state to build it again when used, if
        nothing else refers to it and its path is its own; whether it went. The caller has
        checked that its state is whole without it (``IdleStreams``: nothing in memory that
        is not in Delta, no readers, no forks); a state recovery would parse at start (its
        flags: a fork, soft-deleted, a retention point) is refused here as there."""
        stream = self._by_uid.get(uid)
        if stream is None or self._by_name.get(stream.name) is not stream:
            return False
        if sys.getrefcount(stream) != _UNREFERENCED:
            return False
        name = stream.name
        state = stream.to_state(written_ms=0)
        if state_flags(state) != DORMANT:
            return False
        del state["written_ms"]
        self._cold.put(name, uid, state_json(state))
        del self._by_uid[uid], self._by_name[name]
        return True

    def _wake(self, uid: int) -> Stream:
        state = self._cold.take(uid)
        assert state is not None, uid
        stream = Stream.from_state(state)
        # Access times are persisted lazily; never let a restart expire a stream early.
        stream.last_access_ms = max(stream.last_access_ms, self._recovered_ms)
        self.on_wake(stream)
        self.cold_tails.adopt(stream)
        self._by_uid[uid] = stream
        self._by_name.setdefault(stream.name, stream)
        return stream

    def _cold_uid_at(self, name: str) -> int | None:
        return self._cold.uid_of(name)

    def _cold_uid(self, uid: int) -> int | None:
        return uid if isinstance(uid, int) and self._cold.holds(uid) else None

    def _cold_names(self) -> Iterator[str]:
        return self._cold.names()

    def _cold_uids(self) -> Iterator[int]:
        return self._cold.uids()


def _nothing(stream: Stream) -> None:
    pass


class _View(MutableMapping[_K, Stream], Generic[_K]):
    """Streams by one key (path or uid): the built ones, then the cold ones."""

    def __init__(
        self,
        index: StreamIndex,
        built: dict[_K, Stream],
        cold_uid: Callable[[_K], int | None],
        cold_keys: Callable[[], Iterator[_K]],
    ) -> None:
        self._index = index
        self._built: dict[_K, Stream] = built
        self._cold_uid: Callable[[_K], int | None] = cold_uid
        """The uid of the cold stream at a key; ``None``: none is cold there."""
        self._cold_keys: Callable[[], Iterator[_K]] = cold_keys

    def get(self, key: _K, default: Stream | None = None) -> Stream | None:  # type: ignore[override]
        stream = self._built.get(key)
        if stream is None:
            stream = self._unbuilt(key)
        return stream if stream is not None else default

    def _unbuilt(self, key: _K) -> Stream | None:
        """The cold stream at ``key``, built now; ``None``: there is none."""
        uid = self._cold_uid(key)
        return None if uid is None else self._index._wake(uid)

    def __getitem__(self, key: _K) -> Stream:
        stream = self.get(key)
        if stream is None:
            raise KeyError(key)
        return stream

    def __contains__(self, key: object) -> bool:
        return key in self._built or self._cold_uid(key) is not None  # type: ignore[arg-type]

    def __setitem__(self, key: _K, stream: Stream) -> None:
        if key not in self._built:  # (a lookup builds it first: only a caller's slip lands here)
            self._unbuilt(key)
        self._built[key] = stream

    def __delitem__(self, key: _K) -> None:
        if key not in self._built:
            self._unbuilt(key)
        del self._built[key]

    def __iter__(self) -> Iterator[_K]:
        yield from list(self._built)
        yield from list(self._cold_keys())

    def __len__(self) -> int:
        return len(self._built) + self._index.dormant
