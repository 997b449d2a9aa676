"""Offsets from times: where ``startingTimestamp``, ``startingOffsetsByTimestamp`` and
``endingTimestamp`` put a stream's start or end (Kafka's options of the same names).

Each time becomes the stream's first offset appended at or after it, asked of the server's
time lookup extension (``client.time_lookup``: answered from Delta statistics and the
memory tail, never by reading history). A start at a time after every message is an error
naming the option (``startingOffsetsByTimestampStrategy=error``, Kafka's default) or the
stream's tail (``latest``); an end at such a time is the tail. A server without the
extension fails the query with an error naming the option. Which time applies to which stream
is the read's start or end kind (``range_offsets``).
"""

from __future__ import annotations

from ..client import Stream, TimeLookupUnavailable
from ..options import OptionError


def offset_at(stream: Stream, key: str, option: str, at_ms: int, *, strategy: str) -> str:
    """The first offset of ``stream`` appended at or after ``at_ms``; where none was, its tail
    (``strategy`` ``latest``, or an end) or an ``OptionError`` naming ``option`` (``error``)."""
    try:
        found = stream.offset_at(at_ms)
    except TimeLookupUnavailable as exc:
        raise OptionError(
            f"option '{option}' needs a Durable Streams server with time lookups (the offset-for-time "
            f"extension); {stream.url} does not offer them ({exc})"
        ) from exc
    if found.offset is not None:
        return found.offset
    if strategy == "error":
        raise OptionError(
            f"option '{option}': no message of stream {key} was appended at or after {at_ms} ms since the epoch "
            f"(its tail is {found.next_offset}); set startingOffsetsByTimestampStrategy=latest to start at the tail"
        )
    return found.next_offset
