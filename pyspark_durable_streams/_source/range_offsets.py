"""Each stream's protocol offset where a read starts or ends, from the read's ``Start`` or ``End``.

The options are resolved once into one start kind and one end kind (``_options.range_limits``);
the driver applies them here, stream by stream, given the stream's tail when it asks (Kafka's
offset reader does the same with its ``KafkaOffsetRangeLimit``). Most kinds need nothing but the
tail; a snapshot start asks the stream's HEAD (``snapshot_start``), and a time asks the server's
time lookup (``time_offsets``).
"""

from __future__ import annotations

from typing import NamedTuple, assert_never

from .._options import range_limits as limits
from ..client import Stream
from .offsets import EARLIEST
from .snapshot_start import snapshot_start
from .time_offsets import offset_at


class StreamStart(NamedTuple):
    offset: str
    at_snapshot: bool = False
    """The stream starts at its latest snapshot, whose offset is ``offset``."""


def start_offset(start: limits.Start, key: str, tail: str, stream: Stream) -> StreamStart:
    """Where stream ``key`` (tail ``tail``, reached as ``stream``) starts under ``start``."""
    match start:
        case limits.EarliestStart():
            return StreamStart(EARLIEST)
        case limits.LatestStart():
            return StreamStart(tail)
        case limits.SnapshotStart():
            found = snapshot_start(stream)
            return StreamStart(found, True) if found is not None else StreamStart(EARLIEST)
        case limits.SpecificStart():
            return StreamStart(start.offset(key, tail))
        case limits.TimestampStart(at_ms=at_ms, strategy=strategy):
            return StreamStart(offset_at(stream, key, "startingTimestamp", at_ms, strategy=strategy))
        case limits.StreamTimestampsStart(times=times, strategy=strategy):
            at = dict(times).get(key)
            if at is None:  # (a stream not named starts at its beginning)
                return StreamStart(EARLIEST)
            return StreamStart(offset_at(stream, key, "startingOffsetsByTimestamp", at, strategy=strategy))
        case _:
            assert_never(start)


def end_offset(end: limits.End, key: str, tail: str, stream: Stream) -> str:
    """Where stream ``key`` (tail ``tail``, reached as ``stream``) ends under ``end``."""
    match end:
        case limits.LatestEnd():
            return tail
        case limits.SpecificEnd():
            return end.offset(key, tail)
        case limits.TimestampEnd(at_ms=at_ms):  # (capped at the tail: later messages are not part of this read)
            return min(tail, offset_at(stream, key, "endingTimestamp", at_ms, strategy="latest"))
        case _:
            assert_never(end)
