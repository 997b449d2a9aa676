"""Where the engine finds a stream, by path or by uid, including the streams a restart has not
parsed yet.

Recovery hands the engine the newest state of every live stream. Most streams are idle, so
parsing every state at start makes a restart cost what the server ever kept (300,000 streams
took 14 s). Instead, storage leaves the states of ordinary live streams unparsed
(``storage.state_rows``: *dormant*), and this index builds a dormant stream's ``Stream`` the
first time anything looks it up, by path (a request) or by uid (a replayed WAL record, a
fork's link to its source). A restart costs two dictionary entries per dormant stream.

A built stream can also go back to sleep (``sleep``, by the engine's ``idle.IdleStreams``):
its state kept as JSON bytes, no ``Stream`` (and nothing for the cyclic collector to scan,
``collector.py``) until it is used again, exactly as a stream restored dormant. Only a
stream nothing else refers to sleeps: no request, reader, cache entry or queue holds its
``Stream`` (its reference count says so), so no one can go on using an object the index
has let go while the next lookup builds another.

``by_name`` and ``by_uid`` are two mapping views of one index. Lookups (``[]``, ``get``)
wake a dormant or sleeping stream; membership tests (``in``) and ``len`` do not. Iterating ``values`` or
``items`` wakes every dormant stream (rare paths only); ``loaded`` iterates only the streams
built so far, which are all that per-stream work in the background needs, since every
stream whose state matters before use (buckets, forks, soft-deleted streams, retention
points, tombstones) is parsed at recovery.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, MutableMapping
from typing import Any, Generic, TypeVar

import orjson

from ..storage.state_rows import DORMANT, DormantStates, state_flags
from .stream import Stream

_K = TypeVar("_K", str, int)
_UNREFERENCED = 4
"""``sys.getrefcount`` of a built stream in ``sleep`` that nothing else refers to: the two
maps, ``sleep``'s own variable, and ``getrefcount``'s argument."""
_ZERO_BY_DEFAULT = frozenset(
    ("fork_seq", "fork_sub_offset", "base_seq", "last_access_ms", "last_write_ms", "bytes_total", "snapshot_lsn")
)
"""The counters ``Stream.from_state`` takes as 0 when absent: a sleeping stream's state leaves
them out when 0, as it leaves out every ``None``, ``False`` and empty map (its defaults too)."""


class StreamIndex:
    def __init__(self) -> None:
        self._by_name: dict[str, Stream] = {}
        self._by_uid: dict[int, Stream] = {}
        self._dormant = DormantStates.empty()
        self._dormant_names: dict[str, int] = {}
        self._dormant_uids: dict[int, int] = {}
        self._recovered_ms = 0
        self._asleep: dict[int, bytes] = {}
        """Streams put to sleep: uid -> state JSON."""
        self._asleep_names: dict[str, int] = {}
        self.by_name: _View[str] = _View(self, self._by_name, self._dormant_names, self._asleep_names)
        self.by_uid: _View[int] = _View(self, self._by_uid, self._dormant_uids, self._asleep)

    def hold(self, dormant: DormantStates, recovered_ms: int) -> None:
        """Keep ``dormant`` (at recovery, after the parsed streams are in) until each is used.
        A dormant stream whose path a parsed one also holds (a soft-deleted incarnation) is
        woken now, so the newer incarnation takes the path as it did before."""
        self._dormant = dormant
        self._recovered_ms = recovered_ms
        self._dormant_names.update(zip(dormant.names, range(len(dormant)), strict=True))
        self._dormant_uids.update(zip(dormant.uids, range(len(dormant)), strict=True))
        for name in [name for name in self._by_name if name in self._dormant_names]:
            self._wake(self._dormant_names[name])

    def loaded(self) -> list[Stream]:
        """The streams built so far (not the dormant ones), by uid order of creation."""
        return list(self._by_uid.values())

    def names(self) -> Iterator[str]:
        """Every path, dormant ones included, without waking any."""
        yield from self._by_name
        yield from self._dormant_names
        yield from self._asleep_names

    def rebuild_names(self) -> None:
        """Re-point every built stream's path at its newest incarnation (after recovery)."""
        self._by_name.clear()
        self._by_name.update((stream.name, stream) for stream in self._by_uid.values())

    @property
    def dormant(self) -> int:
        """Streams not built: restored dormant, or put to sleep since."""
        return len(self._dormant_names) + len(self._asleep)

    def built(self, uid: int) -> Stream | None:
        """The stream ``uid`` if it is built now (a dormant or sleeping one stays so)."""
        return self._by_uid.get(uid)

    def look(self, name: str) -> Stream | dict[str, Any] | None:
        """The stream at ``name`` without building it: the built ``Stream``, else the dormant or
        sleeping one's state, parsed (for a look that must not wake it: ``consumers``' lag)."""
        stream = self._by_name.get(name)
        if stream is not None:
            return stream
        if name in self._dormant_names:
            return self._dormant.state(self._dormant_names[name])
        uid = self._asleep_names.get(name)
        if uid is None:
            return None
        state: dict[str, Any] = orjson.loads(self._asleep[uid])
        return state

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
        full = stream.to_state(written_ms=0)
        if state_flags(full) != DORMANT:
            return False
        state = {
            key: value
            for key, value in full.items()
            if not (value is None or value is False or value == {} or (value == 0 and key in _ZERO_BY_DEFAULT))
            and key != "written_ms"
        }
        self._asleep[uid] = memoryview(orjson.dumps(state)).tobytes()  # (orjson's own bytes keep ~8 KB each)
        self._asleep_names[name] = uid
        del self._by_uid[uid], self._by_name[name]
        return True

    def _rouse(self, uid: int) -> Stream:
        stream = Stream.from_state(orjson.loads(self._asleep.pop(uid)))
        del self._asleep_names[stream.name]
        self._by_uid[uid] = stream
        self._by_name[stream.name] = stream
        return stream

    def _wake(self, index: int) -> Stream:
        name, uid = self._dormant.names[index], self._dormant.uids[index]
        del self._dormant_names[name]
        del self._dormant_uids[uid]
        stream = Stream.from_state(self._dormant.state(index))
        # Access times are persisted lazily; never let a restart expire a stream early.
        stream.last_access_ms = max(stream.last_access_ms, self._recovered_ms)
        self._by_uid[uid] = stream
        self._by_name.setdefault(name, stream)
        if not self._dormant_names:
            self._dormant = DormantStates.empty()  # let the recovered rows go
        return stream


class _View(MutableMapping[_K, Stream], Generic[_K]):
    """Streams by one key (path or uid): the built ones, then the dormant and sleeping ones."""

    def __init__(
        self,
        index: StreamIndex,
        built: dict[_K, Stream],
        dormant: dict[_K, int],
        asleep: dict[str, int] | dict[int, bytes],
    ) -> None:
        self._index = index
        self._built: dict[_K, Stream] = built
        self._dormant: dict[_K, int] = dormant
        self._asleep = asleep
        """By path: the uid; by uid: the state."""

    def get(self, key: _K, default: Stream | None = None) -> Stream | None:  # type: ignore[override]
        stream = self._built.get(key)
        if stream is None:
            stream = self._unbuilt(key)
        return stream if stream is not None else default

    def _unbuilt(self, key: _K) -> Stream | None:
        """The dormant or sleeping stream at ``key``, built now; ``None``: there is none."""
        if key in self._dormant:
            return self._index._wake(self._dormant[key])
        found = self._asleep.get(key)  # type: ignore[call-overload]
        if found is None:
            return None
        return self._index._rouse(found if isinstance(found, int) else key)  # type: ignore[arg-type]

    def __getitem__(self, key: _K) -> Stream:
        stream = self.get(key)
        if stream is None:
            raise KeyError(key)
        return stream

    def __contains__(self, key: object) -> bool:
        return key in self._built or key in self._dormant or key in self._asleep

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
        yield from list(self._dormant)
        yield from list(self._asleep)  # type: ignore[misc]

    def __len__(self) -> int:
        return len(self._built) + len(self._dormant) + len(self._asleep)
