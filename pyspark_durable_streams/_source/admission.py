"""How much of what is available the next micro-batch admits (Kafka's ``rateLimit`` and
``delayBatch``): ``maxMessagesPerTrigger`` / ``maxBytesPerTrigger``, or the limit Spark passes,
cap it (``RateLimit``); ``minMessagesPerTrigger`` holds it back while too little waits
(``delayed``, with ``pacing``).

On our server (every message with its own offset, sequence offsets) a stream's waiting messages
are counted by offset arithmetic and a row limit is shared among streams without reading
(``allocate_rows``); elsewhere, and for a byte limit, the driver reads forward to a response
boundary within the budgets, the first stream turning round-robin batch by batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..options import ReadOptions
from .driver_streams import DriverStreams
from .offsets import (
    EARLIEST,
    SEQ_OFFSET,
    allocate_rows,
    is_seq_offset,
    pending_messages,
    seq_of,
    seq_offset,
    starts_inside,
)
from .pacing import Pacing


def read_limits(limit: Any, options: ReadOptions) -> tuple[int | None, int | None]:
    """(messages, bytes) at most in the next batch under Spark's ``limit`` (``None``: no cap)."""
    name = type(limit).__name__
    if name == "ReadMaxRows":
        return int(getattr(limit, "max_rows")), options.max_bytes_per_trigger  # noqa: B009
    if name == "ReadMaxBytes":
        return None, int(getattr(limit, "max_bytes"))  # noqa: B009
    return None, None


def _countable(streams: DriverStreams, key: str, first: str, last: str) -> bool:
    """The messages of ``key`` in ``[first, last)`` can be counted without reading them."""
    return streams.boundaries(key) and is_seq_offset(first) and SEQ_OFFSET.match(last) is not None


def delayed(
    pacing: Pacing | None, streams: DriverStreams, start: Mapping[str, str], end: Mapping[str, str], limit: Any
) -> bool:
    """``minMessagesPerTrigger``: whether ``pacing`` holds the batch ``[start, end)`` back; never
    without pacing (none under ``Trigger.AvailableNow``) or when Spark asks for everything available."""
    if pacing is None or type(limit).__name__ == "ReadAllAvailable":
        return False
    return pacing.hold(_pending(streams, start, end, pacing.min_messages))


def _pending(streams: DriverStreams, start: Mapping[str, str], end: Mapping[str, str], enough: int) -> int:
    """How many messages wait in ``[start, end)``, counted up to ``enough`` at least."""
    pending = 0
    for key in sorted(end):
        first = start.get(key, EARLIEST)
        if end[key] <= first or pending >= enough:
            continue
        if _countable(streams, key, first, end[key]):
            pending += pending_messages(first, end[key])
        else:
            pending += streams.read_forward(key, first, end[key], enough - pending, None)[1]
    return pending


class RateLimit:
    """What the read limit admits of ``[start, end)``; keeps whose turn it is to be read first."""

    def __init__(self) -> None:
        self._turn = 0

    def admit(
        self,
        streams: DriverStreams,
        start: Mapping[str, str],
        end: dict[str, str],
        limits: tuple[int | None, int | None],
    ) -> dict[str, str]:
        """``end`` cut so the batch from ``start`` holds at most ``limits`` (messages, bytes)."""
        max_rows, max_bytes = limits
        keys = [key for key in sorted(end) if end[key] > start.get(key, EARLIEST)]
        if not keys or (max_rows is None and max_bytes is None):
            return end
        counted = max_bytes is None and all(_countable(streams, k, start.get(k, EARLIEST), end[k]) for k in keys)
        if counted and max_rows is not None:
            return _counted(start, end, keys, max_rows)
        return self._read_forward(streams, start, end, keys, limits)

    def _read_forward(
        self,
        streams: DriverStreams,
        start: Mapping[str, str],
        end: dict[str, str],
        keys: list[str],
        limits: tuple[int | None, int | None],
    ) -> dict[str, str]:
        """Read forward on the driver, sharing the budgets; the first stream turns round-robin."""
        self._turn = (self._turn + 1) % len(keys)
        rows_left, bytes_left = limits
        for k in keys[self._turn :] + keys[: self._turn]:
            first = start.get(k, EARLIEST)
            if rows_left == 0 or bytes_left == 0:
                end[k] = first
                continue
            end[k], rows, size = streams.read_forward(k, first, end[k], rows_left, bytes_left)
            rows_left = None if rows_left is None else max(0, rows_left - rows)
            bytes_left = None if bytes_left is None else max(0, bytes_left - size)
        return end


def _counted(start: Mapping[str, str], end: dict[str, str], keys: list[str], max_rows: int) -> dict[str, str]:
    """``max_rows`` shared among the streams by offset arithmetic (``allocate_rows``), nothing read."""
    lags = {k: pending_messages(start.get(k, EARLIEST), end[k]) for k in keys}
    taken = allocate_rows(lags, max_rows)
    for k in keys:
        if taken[k] < lags[k]:
            first = start.get(k, EARLIEST)
            end[k] = seq_offset(seq_of(first) + starts_inside(first) + taken[k]) if taken[k] else first
    return end
