"""Read plans: what part of a range a reader may take from the Delta files, and which files.

A plan covers ``[start, end)`` of one stream, cut at the end of the visible tail. Its Delta
part ends at the *boundary*: the first message not yet flushed to Delta (a fork's inherited
messages are its source's, so the boundary follows the ancestry). Above the boundary the
reader reads over HTTP as before. Below it the plan lists *segments*, one per incarnation
(uid) the range crosses (a fork's source below the fork point, the fork above), each with
the data files of one table version holding them (``storage.read_plans``).

The same checks as a read come first (``reads.check_start``): below the earliest retained
offset is 410, beyond the tail 400, so a plan never reaches what a read could not. A plan
starts at a message boundary (an offset inside a message is answered 400): readers take a
message read partly over HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol.errors import BadRequest
from ..protocol.offsets import Offset
from ..storage.read_plans import PlannedFile
from .engine import Engine
from .reads import check_start
from .stream import Stream


@dataclass(frozen=True, slots=True)
class Segment:
    uid: int
    first: int
    end: int
    files: list[PlannedFile]


@dataclass(frozen=True, slots=True)
class ReadPlan:
    stream: Stream
    start: int
    end: int
    boundary: int
    """``[start, boundary)`` is in the segments' files, ``[boundary, end)`` must be read over HTTP."""
    version: int
    segments: list[Segment]


async def plan(engine: Engine, stream: Stream, start: Offset, end: int | None) -> ReadPlan:
    check_start(engine, stream, start)
    if start.within:
        raise BadRequest(f"a read plan starts at a message boundary, not inside one ({start})", code="INVALID_OFFSET")
    engine.touch(stream)
    stop = stream.visible_tail if end is None else max(start.seq, min(end, stream.visible_tail))
    spans = flushed_spans(engine, stream, start.seq, stop)
    boundary = spans[-1][2] if spans else start.seq
    table = await engine.storage.plan_reads(spans)
    segments = [
        Segment(uid, first, last, files) for (uid, first, last), files in zip(spans, table.segments, strict=True)
    ]
    return ReadPlan(stream, start.seq, stop, boundary, table.version, [s for s in segments if s.end > s.first])


def flushed_spans(engine: Engine, stream: Stream, first: int, end: int) -> list[tuple[int, int, int]]:
    """``(uid, first, end)`` of the incarnations holding ``[first, end)``, in order, cut at the
    first message not in Delta yet (nothing after it is planned)."""
    spans: list[tuple[int, int, int]] = []
    if first < stream.fork_seq and stream.fork_of is not None:
        source = engine.by_uid[stream.fork_of]
        spans = flushed_spans(engine, source, first, min(end, stream.fork_seq))
        reached = spans[-1][2] if spans else first
        if reached < min(end, stream.fork_seq):
            return spans
        first = max(first, stream.fork_seq)
    if first < end:
        own_end = min(end, stream.flushed_tail)
        if own_end > first:
            spans.append((stream.uid, first, own_end))
    return spans
