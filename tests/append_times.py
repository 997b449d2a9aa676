"""Append times of a stream's messages, for the tests of time lookups and time-based reads."""

from __future__ import annotations

import time

from servers import wait_for

from pyspark_durable_streams.client import Stream


def append_times(stream: Stream) -> list[int]:
    """Every message's append time (ms since the epoch), in order, from an Arrow read."""
    stamps: list[int] = []
    for piece in stream.read_arrow("-1"):
        stamps += [ts // 1000 for ts in piece.table["ts"].cast("int64").to_pylist()]
    return stamps


def after(last_ms: int) -> None:
    """Wait (on the clock) until a later millisecond than ``last_ms`` has begun, so the next
    append gets a later time."""
    wait_for(lambda: time.time() * 1000 > last_ms + 2, timeout_s=10, interval_s=0.001)
