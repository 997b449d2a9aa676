"""Time lookups: the first offset of a stream whose message was appended at or after a time.

The stream's readable messages (from ``earliest_readable`` to the visible tail, a fork's
inherited ones in its ancestry) are cut into *parts*, in sequence order: what lies below an
incarnation's ``mem_base`` is in Delta (``storage.time_index`` answers from statistics),
the rest is in memory (``MemoryTail.first_stamped``). The memory parts are answered at once,
before anything is awaited, so a flush that lets memory go while Delta is asked loses
nothing: everything below ``mem_base`` is in Delta by then already.

The answer is the first such message's sequence number, or ``None`` when no message was
appended at or after the time (the caller then names the tail).
"""

from __future__ import annotations

from dataclasses import dataclass

from .engine import Engine
from .stream import Stream


@dataclass(frozen=True, slots=True)
class _Part:
    uid: int
    first: int
    end: int
    stored: bool
    """In Delta (else in memory, answered as ``found``)."""
    found: int | None = None


async def first_at(engine: Engine, stream: Stream, at_ms: int) -> int | None:
    """The sequence number of the first readable message appended at or after ``at_ms``."""
    engine.touch(stream)
    parts = _parts(engine, stream, engine.earliest_readable(stream), stream.visible_tail, at_ms)
    for part in parts:
        if not part.stored:
            if part.found is not None:
                return part.found
            continue
        found = await engine.storage.first_at([(part.uid, part.first, part.end)], at_ms * 1000)
        if found is not None:
            return found
    return None


def _parts(engine: Engine, stream: Stream, first: int, end: int, at_ms: int) -> list[_Part]:
    parts: list[_Part] = []
    if first < stream.fork_seq and stream.fork_of is not None:
        source = engine.by_uid[stream.fork_of]
        parts = _parts(engine, source, first, min(end, stream.fork_seq), at_ms)
        first = max(first, stream.fork_seq)
    if first >= end:
        return parts
    in_memory = max(first, min(end, stream.mem_base))
    if in_memory > first:
        parts.append(_Part(stream.uid, first, in_memory, stored=True))
    if end > in_memory:
        parts.append(_Part(stream.uid, in_memory, end, False, stream.mem.first_stamped(at_ms, in_memory, end)))
    return parts
