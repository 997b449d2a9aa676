"""Where the engine finds a stream, by path or by uid, including the streams a restart has not
parsed yet.

Recovery hands the engine the newest state of every live stream. Most streams are idle, so
parsing every state at start makes a restart cost what the server ever kept (300,000 streams
took 14 s). Instead, storage leaves the states of ordinary live streams unparsed
(``storage.state_rows``: *dormant*), and this index builds a dormant stream's ``Stream`` the
first time anything looks it up, by path (a request) or by uid (a replayed WAL record, a
fork's link to its source). A restart costs two dictionary entries per dormant stream.

``by_name`` and ``by_uid`` are two mapping views of one index. Lookups (``[]``, ``get``)
wake a dormant stream; membership tests (``in``) and ``len`` do not. Iterating ``values`` or
``items`` wakes every dormant stream (rare paths only); ``loaded`` iterates only the streams
built so far, which are all that per-stream work in the background needs, since every
stream whose state matters before use (buckets, forks, soft-deleted streams, retention
points, tombstones) is parsed at recovery.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Generic, TypeVar

from ..storage.state_rows import DormantStates
from .stream import Stream

_K = TypeVar("_K", str, int)


class StreamIndex:
    def __init__(self) -> None:
        self._by_name: dict[str, Stream] = {}
        self._by_uid: dict[int, Stream] = {}
        self._dormant = DormantStates.empty()
        self._dormant_names: dict[str, int] = {}
        self._dormant_uids: dict[int, int] = {}
        self._recovered_ms = 0
        self.by_name: _View[str] = _View(self, self._by_name, self._dormant_names)
        self.by_uid: _View[int] = _View(self, self._by_uid, self._dormant_uids)

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

    def rebuild_names(self) -> None:
        """Re-point every built stream's path at its newest incarnation (after recovery)."""
        self._by_name.clear()
        self._by_name.update((stream.name, stream) for stream in self._by_uid.values())

    @property
    def dormant(self) -> int:
        return len(self._dormant_names)

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
    """Streams by one key (path or uid): the built ones, then the dormant ones."""

    def __init__(self, index: StreamIndex, built: dict[_K, Stream], dormant: dict[_K, int]) -> None:
        self._index = index
        self._built: dict[_K, Stream] = built
        self._dormant: dict[_K, int] = dormant

    def get(self, key: _K, default: Stream | None = None) -> Stream | None:  # type: ignore[override]
        stream = self._built.get(key)
        if stream is None and key in self._dormant:
            stream = self._index._wake(self._dormant[key])
        return stream if stream is not None else default

    def __getitem__(self, key: _K) -> Stream:
        stream = self.get(key)
        if stream is None:
            raise KeyError(key)
        return stream

    def __contains__(self, key: object) -> bool:
        return key in self._built or key in self._dormant

    def __setitem__(self, key: _K, stream: Stream) -> None:
        if key in self._dormant:  # (a lookup wakes it first: only a caller's slip lands here)
            self._index._wake(self._dormant[key])
        self._built[key] = stream

    def __delitem__(self, key: _K) -> None:
        if key in self._dormant:
            self._index._wake(self._dormant[key])
        del self._built[key]

    def __iter__(self) -> Iterator[_K]:
        yield from list(self._built)
        yield from list(self._dormant)

    def __len__(self) -> int:
        return len(self._built) + len(self._dormant)
