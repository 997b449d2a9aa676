"""The streams not built: each one's path, uid and JSON state in columns, found by path or by
uid without a Python object per stream.

Theory of operation
-------------------
A million idle streams should cost about their bytes (the path and the state JSON), not a
``Stream`` each, nor what an index of dictionaries costs beside the state: two dict entries
and three Python objects (path, uid, state) per stream, ~450 bytes.

So cold streams live in one *segment* of columns in row order: ``names`` and ``states``
(Arrow arrays, one chunk per batch of streams added), ``uids`` and ``alive`` (numpy). Two
sorted numpy indexes find a row: the paths' hashes (Python's ``hash`` of the path, which
is this process's own: nothing hashed is ever stored) beside their rows, and the uids
beside theirs. A lookup is a binary search, then, by path, a comparison of the path at
each row of an equal hash (a collision is resolved by the path itself).

The binary search is ``bisect`` over the array's buffer, not numpy's ``searchsorted``:
``searchsorted`` releases the GIL, and on the event loop's thread each release hands it to
whichever thread waits for it (the WAL's sync thread, the flusher's workers), so a lookup
among 100,000 cold streams took 11-14 µs in the server under random appends (1.1-2.4 µs
alone); ``bisect`` keeps the GIL: 3.1-3.3 µs there.

A stream leaves the segment (it is woken and built) by clearing its ``alive`` bit; the
columns are not rewritten for one stream, so a woken stream's row is *dead*. A stream put
to sleep first enters ``recent``: two small dicts. When ``recent`` holds as many streams
as a sixty-fourth of the segment (at least ``MERGE_AT``), they become one more chunk and are
merged into both sorted indexes: a linear merge of sorted arrays, not a sort, so putting a
million streams to sleep costs about a hundred merges (each row is copied ~64 times in all,
~0.2 µs a stream). ``recent``'s small Python objects, made between the objects of the
streams going to sleep, keep the allocator's arenas of those streams resident until the
merge frees them: with a sixteenth, RSS swung by ~200 MiB while a million streams were
created (peaks of 820-889 MiB, 688-795 MiB once idle); with a sixty-fourth, peak 715 MiB,
588 MiB once idle. When more than half the rows are dead
(and at least ``MERGE_AT``), the columns are rewritten without them, chunk by chunk: memory
follows the streams asleep now, not every stream ever asleep.

Memory per cold stream: its path and state as bytes, 8 (uid), 1 (alive), 12 + 12 (the two
indexes) and 8 of Arrow offsets. A stream put to sleep keeps its state's JSON without its name
and uid (``state_json``: the row holds them already; a new stream of the many-streams benchmark:
65 bytes against 112, and 91 MiB of Arrow for a million such streams against 135), and a lookup
puts them back; the rows a restart read keep the JSON of their state rows whole.

A lookup reads a cell as bytes straight from its chunk's offsets and values buffers
(``_Cells``), not through an Arrow scalar, and a wake follows the lookup by path that
found it (``StreamIndex``): the row that lookup found is kept (``_found``) so the wake
does not search again, until anything moves the rows.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from ..storage.message_batch import MessageBatch
from ..storage.state_rows import DormantStates
from .name_snapshots import NameSnapshot

MERGE_AT = 4096
"""The fewest recent streams merged into the segment at once (and the fewest dead rows a
rewrite drops)."""
_MERGE_FRACTION = 64
"""``recent`` is merged once it holds this fraction of the segment (see the module docstring)."""
_HASHED_AT_ONCE = 65536
"""Paths turned into Python strings at once to be hashed (the transient memory of a
recovery's hashing)."""

_Keys = np.ndarray[Any, np.dtype[np.int64]]
_Rows = np.ndarray[Any, np.dtype[np.int32]]


class _Cells:
    """One chunk of a string or binary column, each cell read as bytes from its buffers
    (``MessageBatch``'s offsets and values: a string chunk is viewed as binary, no copy)."""

    __slots__ = ("_offsets", "_values")

    def __init__(self, chunk: pa.Array) -> None:
        if chunk.type not in (pa.string(), pa.binary()):  # (a view type's buffers are laid out otherwise)
            raise TypeError(f"cold stream columns are strings or binaries with offsets, not {chunk.type}")
        batch = MessageBatch(chunk.view(pa.binary()))
        self._offsets = batch.offsets().astype(np.int64).data  # (a memoryview: its item is a Python int at once)
        self._values = batch.values()

    def __getitem__(self, index: int) -> bytes:
        return self._values[self._offsets[index] : self._offsets[index + 1]].tobytes()


class ColdStreams:
    def __init__(self) -> None:
        self._names: list[pa.Array] = []
        self._states: list[pa.Array] = []
        """Chunks: chunk ``i`` holds rows ``_starts[i]`` to ``_starts[i + 1]``."""
        self._name_cells: list[_Cells] = []
        self._state_cells: list[_Cells] = []
        self._starts = [0]
        """(A list: a cell's chunk is found with ``bisect``.)"""
        self._found = (-1, -1)
        """The uid and row the last lookup by path found, for the wake that follows it."""
        self._uids: _Keys = np.empty(0, np.int64)
        self._alive = np.empty(0, np.bool_)
        self._dead = 0
        self._hashes: _Keys = np.empty(0, np.int64)
        self._hash_rows: _Rows = np.empty(0, np.int32)
        self._uid_keys: _Keys = np.empty(0, np.int64)
        self._uid_rows: _Rows = np.empty(0, np.int32)
        self._recent: dict[int, tuple[str, bytes]] = {}
        """Put to sleep since the last merge: uid -> (path, state JSON)."""
        self._recent_names: dict[str, int] = {}
        self._top_uid = -1
        """The largest uid ever held: a uid above it (a new stream's) is not cold, found at once."""
        self._views()

    @classmethod
    def of(cls, dormant: DormantStates) -> ColdStreams:
        """The streams recovery left unparsed, in the chunks it read them in."""
        cold = cls()
        if len(dormant):
            for name_chunk, state_chunk in zip(dormant.names.chunks, dormant.states.chunks, strict=True):
                cold._append(name_chunk, state_chunk)
            cold._uids = dormant.uids
            cold._alive = np.ones(len(dormant), np.bool_)
            hashes = np.empty(len(dormant), np.int64)
            for start in range(0, len(dormant), _HASHED_AT_ONCE):
                names = dormant.names.slice(start, _HASHED_AT_ONCE).to_pylist()
                hashes[start : start + len(names)] = [hash(name) for name in names]
            cold._index(cold._uids, hashes, np.arange(len(dormant), dtype=np.int32))
        return cold

    def __len__(self) -> int:
        return len(self._alive) - self._dead + len(self._recent)

    def rows(self) -> int:
        """What is kept: the segment's rows, the woken ones not yet dropped included, and the
        recent streams."""
        return len(self._alive) + len(self._recent)

    # -- lookups (none of them takes a stream out) ----------------------------------------

    def uid_of(self, name: str) -> int | None:
        """The uid of the cold stream at ``name``; ``None``: none is cold there."""
        uid = self._recent_names.get(name)
        if uid is not None:
            return uid
        row = self._row_of_name(name)
        if row is None:
            return None
        uid = self._uid_view[row]
        self._found = (uid, row)
        return uid

    def holds(self, uid: int) -> bool:
        return uid <= self._top_uid and (uid in self._recent or self._row_of_uid(uid) is not None)

    def peek(self, uid: int, name: str | None = None) -> dict[str, Any] | None:
        """The state of the cold stream ``uid``, parsed; it stays cold. ``name``: its path, where the
        caller found it by path (else read from its row if its state left it out)."""
        found = self._recent.get(uid)
        if found is not None:
            return _whole(_parsed(found[1]), found[0], uid)
        row = self._found_row(uid)
        return None if row is None else self._state_at(row, uid, name)

    def names(self) -> Iterator[str]:
        for chunk in self.take_names([]).column().chunks:
            yield from chunk.to_pylist()

    def take_names(self, first: list[str]) -> NameSnapshot:
        """The paths as of now, ``first`` before them: the recent sleepers' copied, the segment's
        chunks held and its alive bits copied (not even those while no row is dead)."""
        alive = self._alive.copy() if self._dead else None
        return NameSnapshot(first + list(self._recent_names), tuple(self._names), alive)

    def uids(self) -> Iterator[int]:
        yield from list(self._recent)
        yield from self._uids[self._alive].tolist()

    # -- in and out -------------------------------------------------------------------

    def put(self, name: str, uid: int, state: bytes) -> None:
        """Keep the stream ``uid`` at ``name`` cold, its state ``state`` (JSON, its name and uid left
        out or not: ``state_json``)."""
        self._recent[uid] = (name, state)
        self._recent_names[name] = uid
        self._top_uid = max(self._top_uid, uid)
        if len(self._recent) >= max(MERGE_AT, len(self._alive) // _MERGE_FRACTION):
            self._merge_recent()

    def take(self, uid: int) -> dict[str, Any] | None:
        """The state of the cold stream ``uid``, parsed, and the stream no longer cold."""
        found = self._recent.pop(uid, None)
        if found is not None:
            del self._recent_names[found[0]]
            return _whole(_parsed(found[1]), found[0], uid)
        row = self._found_row(uid)
        if row is None:
            return None
        state = self._state_at(row, uid, None)
        self._kill(row)
        return state

    def replace(self, name: str, uid: int, state: bytes) -> None:
        """The cold stream ``uid`` at ``name`` keeps ``state`` from now on (an append that did not
        build it: ``cold_appends``); it stays cold."""
        if uid in self._recent:
            self._recent[uid] = (name, state)
            return
        row = self._found_row(uid)
        assert row is not None, uid
        self._kill(row)
        self.put(name, uid, state)

    def _found_row(self, uid: int) -> int | None:
        """The row of the cold stream ``uid`` in the segment (the last lookup by path's, if it found it)."""
        return self._found[1] if self._found[0] == uid else self._row_of_uid(uid)

    def _kill(self, row: int) -> None:
        """The stream at ``row`` is no longer in the segment (its row is dead)."""
        self._alive[row] = False
        self._dead += 1
        self._found = (-1, -1)
        if self._dead >= MERGE_AT and self._dead * 2 > len(self._alive):
            self._drop_dead()

    # -- the segment ------------------------------------------------------------------

    def _row_of_name(self, name: str) -> int | None:
        key, hashes, rows, alive = hash(name), self._hash_view, self._hash_row_view, self._alive_view
        at = bisect.bisect_left(hashes, key)
        encoded = None
        while at < len(hashes) and hashes[at] == key:
            row = rows[at]
            if alive[row]:
                encoded = encoded or name.encode()
                if self._cell(self._name_cells, row) == encoded:
                    return row
            at += 1
        return None

    def _row_of_uid(self, uid: int) -> int | None:
        keys, rows, alive = self._uid_key_view, self._uid_row_view, self._alive_view
        at = bisect.bisect_left(keys, uid)
        while at < len(keys) and keys[at] == uid:  # (a woken row, then its sleep again)
            row = rows[at]
            if alive[row]:
                return row
            at += 1
        return None

    def _state_at(self, row: int, uid: int, name: str | None) -> dict[str, Any]:
        """The state at ``row`` (the stream ``uid``'s, at ``name`` if the caller knows it), parsed and whole."""
        state = _parsed(self._cell(self._state_cells, row))
        if "name" in state:  # (a restart's row: its state row's JSON, whole)
            return state
        return _whole(state, self._cell(self._name_cells, row).decode() if name is None else name, uid)

    def _cell(self, chunks: list[_Cells], row: int) -> bytes:
        chunk = bisect.bisect_right(self._starts, row) - 1
        return chunks[chunk][row - self._starts[chunk]]

    def _chunks(self, chunks: list[pa.Array]) -> Iterator[tuple[pa.Array, np.ndarray[Any, np.dtype[np.bool_]]]]:
        for index, chunk in enumerate(chunks):
            yield chunk, self._alive[self._starts[index] : self._starts[index + 1]]

    def _merge_recent(self) -> None:
        uids = list(self._recent)
        names = [name for name, _ in self._recent.values()]
        states = [state for _, state in self._recent.values()]
        hashes = np.fromiter((hash(name) for name in names), np.int64, len(names))
        self._add(pa.array(names, pa.string()), np.array(uids, np.int64), pa.array(states, pa.binary()), hashes)
        self._recent.clear()
        self._recent_names.clear()

    def _add(self, names: pa.Array, uids: _Keys, states: pa.Array, hashes: _Keys) -> None:
        first = len(self._alive)
        self._append(names, states)
        self._uids = np.concatenate([self._uids, uids])
        self._alive = np.concatenate([self._alive, np.ones(len(uids), np.bool_)])
        self._index(uids, hashes, np.arange(first, first + len(uids), dtype=np.int32))

    def _append(self, names: pa.Array, states: pa.Array) -> None:
        """``names`` and ``states`` as the columns' next chunk (their uids, alive bits and index
        entries are the caller's to add)."""
        self._names.append(names)
        self._states.append(states)
        self._name_cells.append(_Cells(names))
        self._state_cells.append(_Cells(states))
        self._starts.append(self._starts[-1] + len(states))

    def _index(self, uids: _Keys, hashes: _Keys, rows: _Rows) -> None:
        """The rows ``rows`` (``uids``, their paths' ``hashes``) in both sorted indexes."""
        if len(uids):
            self._top_uid = max(self._top_uid, int(uids.max()))
        self._found = (-1, -1)
        self._hashes, self._hash_rows = _merged(self._hashes, self._hash_rows, hashes, rows)
        self._uid_keys, self._uid_rows = _merged(self._uid_keys, self._uid_rows, uids, rows)
        self._views()

    def _drop_dead(self) -> None:
        """Rewrite the segment without its dead rows (chunk by chunk: the transient memory is
        one chunk's)."""
        alive = self._alive
        renumbered = (np.cumsum(alive, dtype=np.int64) - 1).astype(np.int32)
        names = [chunk.filter(pa.array(mask)) for chunk, mask in self._chunks(self._names)]
        states = [chunk.filter(pa.array(mask)) for chunk, mask in self._chunks(self._states)]
        kept = [index for index, chunk in enumerate(names) if len(chunk)]
        self._names = [names[index] for index in kept]
        self._states = [states[index] for index in kept]
        self._name_cells = [_Cells(chunk) for chunk in self._names]
        self._state_cells = [_Cells(chunk) for chunk in self._states]
        self._starts = [0, *itertools.accumulate(len(chunk) for chunk in self._names)]
        self._found = (-1, -1)
        self._hashes, self._hash_rows = _renumbered(self._hashes, self._hash_rows, alive, renumbered)
        self._uid_keys, self._uid_rows = _renumbered(self._uid_keys, self._uid_rows, alive, renumbered)
        self._uids = self._uids[alive]
        self._alive = np.ones(len(self._uids), np.bool_)
        self._dead = 0
        self._views()

    def _views(self) -> None:
        """(Whenever the arrays below are replaced.) The lookups read them through memoryviews: an
        item of one is a Python int (or bool) at once, where indexing the array makes a NumPy
        scalar first (a lookup by path among a million: 2.6-2.7 µs against 3.0-3.1, bench/README.md). An
        ``_alive`` bit cleared in place shows in its view."""
        self._hash_view: memoryview = self._hashes.data
        self._hash_row_view: memoryview = self._hash_rows.data
        self._uid_key_view: memoryview = self._uid_keys.data
        self._uid_row_view: memoryview = self._uid_rows.data
        self._uid_view: memoryview = self._uids.data
        self._alive_view: memoryview = self._alive.data


def state_json(state: dict[str, Any]) -> bytes:
    """``state`` as the cold index keeps it: its JSON without its name and uid, which the index's
    row holds already (``state`` is as it was afterwards, but for its keys' order)."""
    name, uid = state.pop("name"), state.pop("uid")
    try:
        return orjson.dumps(state)
    finally:
        state["name"], state["uid"] = name, uid


def _whole(state: dict[str, Any], name: str, uid: int) -> dict[str, Any]:
    """``state`` (parsed from the index) with its name and uid."""
    if "name" not in state:
        state["name"], state["uid"] = name, uid
    return state


def _parsed(state: str | bytes) -> dict[str, Any]:
    parsed: dict[str, Any] = orjson.loads(state)
    return parsed


def _merged(keys: _Keys, rows: _Rows, new_keys: _Keys, new_rows: _Rows) -> tuple[_Keys, _Rows]:
    """``keys`` (sorted) with ``new_keys`` merged in, each beside its row."""
    order = np.argsort(new_keys, kind="stable")
    at = np.searchsorted(keys, new_keys[order], side="right")
    return np.insert(keys, at, new_keys[order]), np.insert(rows, at, new_rows[order])


def _renumbered(
    keys: _Keys, rows: _Rows, alive: np.ndarray[Any, np.dtype[np.bool_]], renumbered: _Rows
) -> tuple[_Keys, _Rows]:
    """An index without its dead rows, its rows numbered as after the rewrite."""
    kept = alive[rows]
    return keys[kept], renumbered[rows[kept]]
