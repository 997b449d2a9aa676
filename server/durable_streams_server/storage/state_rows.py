"""What a ``state`` row tells recovery before its JSON is parsed, and the rows recovery defers.

A restart must not cost a parsed JSON state per stream ever kept (300,000 idle streams took
14 s to restart that way). Most streams need nothing at start: their state can wait until a
request, a replayed WAL record or a fork first asks for them. A few cannot wait: buckets,
tombstones (purges to resume), forks and soft-deleted streams (fork links and counts), and
streams with a retention point or policy (purges of messages below it, points to move).

So every ``state`` row carries one byte of flags in its ``data`` column (unused by state rows
otherwise): the bits below, computed from the state when the row is written. A row whose
flags are ``0`` is *dormant*: recovery keeps its path, uid and JSON as read (an Arrow array,
no Python object per row) and the engine parses it on first use. Every other row (flags set,
or no flags: a row written before they existed) is parsed at recovery, as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DELETED = 1
BUCKET = 2
FORK = 4
SOFT_DELETED = 8
RETENTION = 16
DORMANT = b"\x00"
"""The flags of a row recovery may leave unparsed."""


def state_flags(state: dict[str, Any]) -> bytes:
    """The one-byte flags of a state row (see the module docstring)."""
    flags = (
        (DELETED if state.get("deleted") else 0)
        | (BUCKET if state.get("type") == "bucket" else 0)
        | (FORK if state.get("fork_of") is not None else 0)
        | (SOFT_DELETED if state.get("soft_deleted") else 0)
        | (RETENTION if state.get("snapshot_seq") or state.get("retention") else 0)
    )
    return bytes((flags,))


@dataclass(frozen=True, slots=True)
class DormantStates:
    """Live streams recovery did not parse, as Arrow columns (no Python object per stream):
    ``names[i]`` and ``uids[i]`` are the path and uid of the stream whose JSON state is
    ``states[i]``."""

    names: pa.StringArray
    uids: pa.Int64Array
    states: pa.ChunkedArray
    """(Chunked as recovery read them: not concatenated into one more copy.)"""

    def __len__(self) -> int:
        return len(self.names)

    def state(self, index: int) -> dict[str, Any]:
        """The parsed state of ``names[index]``."""
        parsed: dict[str, Any] = json.loads(self.states[index].as_py())
        return parsed

    @staticmethod
    def empty() -> DormantStates:
        return DormantStates(pa.array([], pa.string()), pa.array([], pa.int64()), pa.chunked_array([], pa.string()))


@dataclass(frozen=True, slots=True)
class RecoveredRows:
    """The newest ``state`` and ``subscription`` row of every uid, as recovery hands them on."""

    states: dict[int, dict[str, Any]]
    """Parsed now: every flagged state (or one without flags), live or not."""
    subscriptions: dict[int, dict[str, Any] | None]
    """Every subscription (``None``: deleted; uid 0: the signing keys)."""
    dormant: DormantStates
    """The live streams left unparsed."""

    def all_states(self) -> dict[int, dict[str, Any]]:
        """Every state, the dormant ones parsed too (for tools and tests)."""
        states = dict(self.states)
        for index, uid in enumerate(self.dormant.uids.to_pylist()):
            states[uid] = self.dormant.state(index)
        return states


def split_rows(newest: pa.Table, metas: pa.ChunkedArray, *, state_kind: str) -> RecoveredRows:
    """``newest``: one row per ``(kind, stream_uid)`` with columns ``kind``, ``stream``,
    ``stream_uid``, ``data`` and ``row`` (the position of its JSON in ``metas``)."""
    is_state = pc.equal(newest["kind"], state_kind)
    dormant_mask = pc.fill_null(pc.and_(is_state, pc.equal(newest["data"], pa.scalar(DORMANT, pa.binary()))), False)
    dormant = newest.filter(dormant_mask)
    states: dict[int, dict[str, Any]] = {}
    subscriptions: dict[int, dict[str, Any] | None] = {}
    rest = newest.filter(pc.invert(dormant_mask))
    for kind, uid, row in zip(
        rest["kind"].to_pylist(), rest["stream_uid"].to_pylist(), rest["row"].to_pylist(), strict=True
    ):
        meta = metas[row].as_py()
        if kind == state_kind:
            states[uid] = json.loads(meta)
        else:
            subscriptions[uid] = json.loads(meta) if meta is not None else None
    positions = dormant["row"].to_numpy()
    order = pa.array(np.argsort(positions, kind="stable"))
    return RecoveredRows(
        states,
        subscriptions,
        DormantStates(
            _column(dormant["stream"].take(order), pa.string()),
            _column(dormant["stream_uid"].take(order), pa.int64()),
            _taken(metas, np.sort(positions)),
        ),
    )


def _column(column: pa.ChunkedArray, type_: pa.DataType) -> Any:
    """``column`` as one array of ``type_`` (the rows of the newest states only: the older
    rows' JSON recovery read is let go with the table it came in)."""
    return column.cast(type_).combine_chunks()


def _taken(metas: pa.ChunkedArray, positions: np.ndarray[Any, np.dtype[np.int64]]) -> pa.ChunkedArray:
    """The JSON at ``positions`` (ascending) of ``metas``, a chunk for each chunk they fall in.
    (A take of the whole column concatenates its chunks first: for a million streams, every
    row's JSON copied once more beside what is kept, ~+400 MiB at the peak of a restart.)"""
    pieces = []
    start = 0
    for chunk in metas.chunks:
        lo, hi = np.searchsorted(positions, (start, start + len(chunk)))
        if hi > lo:
            pieces.append(chunk.take(pa.array(positions[lo:hi] - start)).cast(pa.string()))
        start += len(chunk)
    return pa.chunked_array(pieces, pa.string())
