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

import functools
import re
from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from ..client.reading import BEGINNING

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


_SUFFIX = np.frombuffer(b"_0000000000000000", dtype=np.uint8)
_FOUR_DIGITS = np.array([b"%04d" % i for i in range(10_000)], dtype="S4").view(np.uint32)
"""The ASCII of ``0000`` … ``9999``, one ``uint32`` each: an offset's 16 digits are four of them."""
_OFFSET_WIDTH = 33
_MAX_ROWS_PER_ARRAY = (2**31 - 1) // _OFFSET_WIDTH  # an Arrow string array's int32 offsets
_BLOCK = 10_000
"""Sequence numbers in a block share their first 12 digits (``_block_text``)."""


def seq_offsets(seqs: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``seq_offset`` of every element, written straight into an Arrow string array's buffers
    with numpy (no Python string per message, no per-element string kernels). A run of
    consecutive sequence numbers (what a read hands out) is copied from a template of
    offsets instead of being formatted: a fifth of the time."""
    values = seqs.to_numpy(zero_copy_only=False)  # (a column of one chunk: its buffer, not a copy)
    count = len(values)
    if count and not (values.min() >= 0 and values.max() < 10**16):
        raise ValueError("sequence numbers have 16 decimal digits at most")
    if count > _MAX_ROWS_PER_ARRAY:
        raise ValueError(f"at most {_MAX_ROWS_PER_ARRAY} offsets per array")
    consecutive = count and (np.diff(values) == 1).all()
    text = _consecutive_text(int(values[0]), count) if consecutive else _text(values)
    return pa.StringArray.from_buffers(count, pa.py_buffer(_positions(count)), pa.py_buffer(text))


def _text(values: np.ndarray) -> np.ndarray:
    """The offsets' characters end to end, any sequence numbers."""
    high = values // 100_000_000
    low = (values - high * 100_000_000).astype(np.uint32)
    high = high.astype(np.uint32)
    digits = np.empty((len(values), 4), dtype=np.uint32)
    digits[:, 0], digits[:, 1] = _FOUR_DIGITS[high // 10_000], _FOUR_DIGITS[high % 10_000]
    digits[:, 2], digits[:, 3] = _FOUR_DIGITS[low // 10_000], _FOUR_DIGITS[low % 10_000]
    text = np.empty((len(values), _OFFSET_WIDTH), dtype=np.uint8)
    text[:, :16] = digits.view(np.uint8)
    text[:, 16:] = _SUFFIX
    return text


def _consecutive_text(first: int, count: int) -> np.ndarray:
    """The offsets' characters end to end for ``first, first + 1, …``: each block's stretch copied
    from ``_block_text``, its first 12 digits then written over it."""
    template = _block_text()
    text = np.empty(count * _OFFSET_WIDTH, dtype=np.uint8)
    at, seq = 0, first
    while at < count:
        low = seq % _BLOCK
        rows = min(count - at, _BLOCK - low)
        text[at * _OFFSET_WIDTH : (at + rows) * _OFFSET_WIDTH] = template[
            low * _OFFSET_WIDTH : (low + rows) * _OFFSET_WIDTH
        ]
        if seq >= _BLOCK:  # (the template's first 12 digits are zeros)
            leading = np.ndarray((rows,), "S12", text, at * _OFFSET_WIDTH, (_OFFSET_WIDTH,))
            leading[:] = b"%012d" % (seq // _BLOCK)
        at, seq = at + rows, seq + rows
    return text


@functools.cache
def _block_text() -> np.ndarray:
    """The offsets of sequence numbers 0 … 9,999 end to end (330,000 bytes, made once)."""
    text = np.empty((_BLOCK, _OFFSET_WIDTH), dtype=np.uint8)
    text[:, :12] = ord("0")
    text[:, 12:16] = _FOUR_DIGITS.view(np.uint8).reshape(_BLOCK, 4)
    text[:, 16:] = _SUFFIX
    return text.reshape(-1)


_positions_made = np.zeros(1, np.int32)


def _positions(count: int) -> np.ndarray:
    """Where each of ``count`` offsets starts, and the end: a view of positions made once for the
    largest count so far (every offset is ``_OFFSET_WIDTH`` long)."""
    global _positions_made
    made = _positions_made
    if len(made) <= count:
        rows = min(max(count, 2 * len(made)), _MAX_ROWS_PER_ARRAY)
        made = _positions_made = np.arange(0, _OFFSET_WIDTH * (rows + 1), _OFFSET_WIDTH, dtype=np.int32)
    return made[: count + 1]


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
