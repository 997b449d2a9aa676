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
    """Live streams recovery did not parse, as Arrow columns (no Python object per stream): row
    ``i`` is the stream at path ``names[i]`` with uid ``uids[i]`` and JSON state ``states[i]``.
    ``names`` and ``states`` are chunked alike, a chunk per batch recovery read."""

    names: pa.ChunkedArray
    uids: np.ndarray[Any, np.dtype[np.int64]]
    states: pa.ChunkedArray

    def __len__(self) -> int:
        return len(self.uids)

    def state(self, row: int) -> dict[str, Any]:
        """The parsed state at ``row``."""
        parsed: dict[str, Any] = json.loads(self.states[row].as_py())
        return parsed

    @staticmethod
    def of(names: pa.Array, uids: pa.Array, states: pa.Array) -> DormantStates:
        """The rows of the arrays ``names``, ``uids`` and ``states``, one chunk."""
        return DormantStates(pa.chunked_array([names]), uids.to_numpy(zero_copy_only=False), pa.chunked_array([states]))

    @staticmethod
    def empty() -> DormantStates:
        return DormantStates.of(pa.array([], pa.string()), pa.array([], pa.int64()), pa.array([], pa.string()))


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
        for row, uid in enumerate(self.dormant.uids.tolist()):
            states[uid] = self.dormant.state(row)
        return states


def split_rows(newest: pa.Table, read: list[pa.RecordBatch], *, state_kind: str) -> RecoveredRows:
    """``newest``: one row per ``(kind, stream_uid)`` with columns ``kind``, ``stream_uid``,
    ``data`` and ``row`` (its position among the rows of ``read``); ``read``: the rows recovery
    read, in batches with ``stream``, ``stream_uid`` and ``meta``, which this takes: each is let
    go of once the rows wanted of it are copied. (With every batch read held until the rows kept
    were copied, a sleeping stream's JSON was held twice at the end, as read and as kept: a
    restart of a million streams peaked at ~890 MiB; letting go of each batch, at ~625.)"""
    starts = np.cumsum([0, *(batch.num_rows for batch in read)])
    is_state = pc.equal(newest["kind"], state_kind)
    dormant_mask = pc.fill_null(pc.and_(is_state, pc.equal(newest["data"], pa.scalar(DORMANT, pa.binary()))), False)
    states: dict[int, dict[str, Any]] = {}
    subscriptions: dict[int, dict[str, Any] | None] = {}
    rest = newest.filter(pc.invert(dormant_mask))
    for kind, uid, row in zip(
        rest["kind"].to_pylist(), rest["stream_uid"].to_pylist(), rest["row"].to_pylist(), strict=True
    ):
        batch = int(np.searchsorted(starts, row, side="right")) - 1
        meta = read[batch]["meta"][row - int(starts[batch])].as_py()
        if kind == state_kind:
            states[uid] = json.loads(meta)
        else:
            subscriptions[uid] = json.loads(meta) if meta is not None else None
    wanted = np.zeros(int(starts[-1]), np.bool_)
    wanted[newest.filter(dormant_mask)["row"].to_numpy()] = True
    return RecoveredRows(states, subscriptions, _dormant(read, wanted))


def _dormant(read: list[pa.RecordBatch], wanted: np.ndarray[Any, np.dtype[np.bool_]]) -> DormantStates:
    """The rows ``wanted`` of ``read``, a chunk per batch, each batch let go of once copied."""
    names: list[pa.Array] = []
    uids: list[np.ndarray[Any, np.dtype[np.int64]]] = []
    states: list[pa.Array] = []
    read.reverse()
    start = 0
    while read:
        batch = read.pop()
        rows = wanted[start : start + batch.num_rows]
        start += batch.num_rows
        if rows.any():
            kept = batch.filter(pa.array(rows))
            names.append(kept["stream"])
            uids.append(kept["stream_uid"].to_numpy(zero_copy_only=False))
            states.append(kept["meta"])
    return DormantStates(
        pa.chunked_array(names, pa.string()),
        np.concatenate(uids) if uids else np.empty(0, np.int64),
        pa.chunked_array(states, pa.string()),
    )
