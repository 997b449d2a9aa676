"""Offset arithmetic for the source: pure functions, no I/O.

A Spark offset of this source is a JSON object ``{stream key: protocol offset}`` where the
protocol offset is the *next* offset to read in that stream. Protocol offsets are opaque
strings whose string order is stream order (true of our server and of the reference
server), and ``EARLIEST`` (``-1``, the beginning) sorts before every real offset. This
module owns that sentinel for the connector.

Our server's offsets are ``SSSSSSSSSSSSSSSS_BBBBBBBBBBBBBBBB``: a message sequence number
and a byte position inside that message. On that server (and only there) ranges are split
and counted by sequence number without reading anything. An offset whose byte position is
not 0 starts inside a message (``starts_inside``): that message was read up to there
already, so it counts as behind the offset, not after it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from .client.reading import BEGINNING

EARLIEST = BEGINNING
"""The protocol's "from the beginning" offset, ``-1``; ``startingOffsets=earliest`` maps to it."""
SEQ_OFFSET = re.compile(r"^(\d{16})_(\d{16})$")


def is_seq_offset(offset: str) -> bool:
    return offset == EARLIEST or SEQ_OFFSET.match(offset) is not None


def seq_of(offset: str) -> int:
    """The message sequence number an offset points at (``-1`` is message 0)."""
    if offset == EARLIEST:
        return 0
    match = SEQ_OFFSET.match(offset)
    if match is None:
        raise ValueError(f"not a sequence offset: {offset!r}")
    return int(match.group(1))


def starts_inside(offset: str) -> bool:
    """Whether a sequence offset points past the first byte of its message (``EARLIEST``
    and offsets of other servers never do)."""
    match = SEQ_OFFSET.match(offset)
    return match is not None and int(match.group(2)) != 0


def seq_offset(seq: int) -> str:
    return f"{seq:016d}_0000000000000000"


def seq_offsets(seqs: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``seq_offset`` of every element, computed by Arrow (no Python string per message)."""
    digits = pc.utf8_lpad(pc.cast(seqs, pa.string()), width=16, padding="0")
    return pc.binary_join_element_wise(digits, "_0000000000000000", "")


def first_excluded(end: str) -> int:
    """The first message whose own offset is at or after ``end`` (a sequence offset): the
    message ``end`` points into still starts before it."""
    if SEQ_OFFSET.match(end) is None:
        raise ValueError(f"not a sequence offset: {end!r}")
    return seq_of(end) + starts_inside(end)


def pending_messages(start: str, end: str) -> int:
    """How many messages start at or after ``start`` and before ``end`` (sequence offsets)."""
    if end <= start:
        return 0
    first = seq_of(start) + starts_inside(start)  # a message read up to ``start`` is behind it
    return max(0, seq_of(end) - first)


def split_range(start: str, end: str, pieces: int) -> list[tuple[str, str]]:
    """``[start, end)`` cut into at most ``pieces`` ranges at message boundaries, in order.

    A pure function of its arguments, so planning the same batch twice gives the same cuts.
    """
    first, last = seq_of(start), seq_of(end)
    count = last - first
    pieces = max(1, min(pieces, count))
    if pieces == 1:
        return [(start, end)]
    bounds = [first + (count * i) // pieces for i in range(1, pieces)]
    edges = [start, *(seq_offset(b) for b in bounds), end]
    return [(edges[i], edges[i + 1]) for i in range(pieces) if edges[i] < edges[i + 1]]


def allocate_rows(lags: Mapping[str, int], budget: int) -> dict[str, int]:
    """Share ``budget`` messages among streams fairly (water-filling): streams with a small
    backlog take all of it, the rest split what remains evenly. Deterministic: ties go to
    streams in key order."""
    taken = {key: 0 for key in lags}
    remaining = budget
    open_keys = sorted(key for key, lag in lags.items() if lag > 0)
    while remaining > 0 and open_keys:
        share = max(1, remaining // len(open_keys))
        for key in list(open_keys):
            give = min(share, lags[key] - taken[key], remaining)
            taken[key] += give
            remaining -= give
            if taken[key] >= lags[key]:
                open_keys.remove(key)
            if remaining == 0:
                break
    return taken


def sorted_offsets(offsets: Mapping[str, str]) -> dict[str, str]:
    """Spark compares offsets by their JSON text: always emit keys in the same order."""
    return {key: offsets[key] for key in sorted(offsets)}
