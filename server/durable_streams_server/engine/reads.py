"""Reading a stream: stitching fork ancestry, the Delta history and the in-memory tail.

A stream's sequence space is shared with its fork ancestry: sequence numbers below a
fork's ``fork_seq`` belong to its source (recursively), the rest to the fork. Within one
incarnation, messages below ``mem_base`` live only in Delta; the rest are in memory.
A read gathers whole messages until a byte budget is spent; a single message larger than
the budget is served in slices addressed by the offset's byte field.
"""

from __future__ import annotations

import asyncio

from ..protocol.errors import BadRequest, Gone
from ..protocol.offsets import Offset, encode_seq
from .engine import Engine
from .stream import Stream
from .types import ReadResult


async def read(engine: Engine, stream: Stream, start: Offset, max_bytes: int, *, whole: bool = False) -> ReadResult:
    """Messages from ``start`` up to the visible tail, at most about ``max_bytes`` of them.

    A first message larger than ``max_bytes`` is sliced (the next offset then points inside
    it) unless ``whole`` asks for complete messages, as message-framed responses need.
    """
    check_start(engine, stream, start)
    tail = stream.visible_tail
    chunks: list[bytes] = []
    stamps: list[int] = []
    next_offset = start
    if start.seq < tail:
        messages = await _gather(engine, stream, start.seq, tail, max_bytes + start.within)
        chunks = [data for data, _ in messages]
        stamps = [ts for _, ts in messages]
        chunks[0] = chunks[0][start.within :]
        if len(chunks[0]) > max_bytes and not whole:
            chunks, stamps = [chunks[0][:max_bytes]], stamps[:1]
            next_offset = Offset(start.seq, start.within + max_bytes)
        else:
            next_offset = Offset(start.seq + len(messages), 0)
    at_tail = next_offset.seq == tail and next_offset.within == 0
    return ReadResult(
        stream=stream,
        start=start,
        next=next_offset,
        chunks=chunks,
        stamps=stamps,
        up_to_date=at_tail,
        closed=at_tail and stream.visible_closed,
    )


def check_start(engine: Engine, stream: Stream, start: Offset) -> None:
    """410 below the retained history, 400 beyond the tail: before any response starts."""
    earliest = engine.earliest_readable(stream)
    if start.seq < earliest:
        raise Gone(
            f"offset {start} is older than the earliest retained offset {encode_seq(earliest)}: "
            "re-initialize from /bootstrap",
            code="OFFSET_GONE",
        )
    tail = stream.visible_tail
    if start.seq > tail or (start.seq == tail and start.within != 0):
        raise BadRequest(f"offset {start} is beyond the tail of the stream", code="OFFSET_OUT_OF_RANGE")


async def _gather(engine: Engine, stream: Stream, start: int, end: int, budget: int) -> list[tuple[bytes, int]]:
    """Whole messages ``start..end`` (at least one) until ``budget`` bytes are reached, as
    ``(data, append time in ms)``."""
    gathered: list[tuple[bytes, int]] = []
    if start < stream.fork_seq and stream.fork_of is not None:
        source = engine.by_uid[stream.fork_of]
        gathered = await _gather(engine, source, start, min(end, stream.fork_seq), budget)
        start += len(gathered)
        budget -= sum(len(data) for data, _ in gathered)
        if start < stream.fork_seq or budget <= 0:
            return gathered
    # History below mem_base is in Delta, the rest in memory; a flush may move mem_base
    # while a Delta read is awaited, so re-check it on every round.
    while start < end and (not gathered or budget > 0):
        if start < stream.mem_base:
            history_end = min(end, stream.mem_base, start + max(1, budget // 64 + 1))
            stored = await engine.storage.read_messages(stream.uid, start, history_end)
            if not stored or stored[0].seq != start or stored[-1].seq != start + len(stored) - 1:
                raise RuntimeError(f"stream {stream.name!r}: messages from {start} missing from Delta")
            for row in stored:
                if gathered and budget <= 0:
                    return gathered
                gathered.append((row.data, row.ts_ms))
                budget -= len(row.data)
                start += 1
            continue
        offset, limit = start - stream.mem_base, end - stream.mem_base
        messages, stamps = stream.messages, stream.stamps
        while offset < limit and (not gathered or budget > 0):
            data = messages[offset]
            gathered.append((data, stamps[offset]))
            budget -= len(data)
            offset += 1
        break
    return gathered


async def wait_for_change(stream: Stream, seq: int, timeout_s: float) -> bool:
    """Wait until data beyond ``seq`` is visible, the stream closes or goes away.

    Returns ``False`` on timeout. Waiters are woken by ``Engine.on_durable``; nothing polls.
    """
    if stream.visible_tail > seq or stream.visible_closed:
        return True
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    stream.waiters.add(waiter)
    try:
        await asyncio.wait_for(waiter, timeout_s)
        return True
    except TimeoutError:
        return False
    finally:
        stream.waiters.discard(waiter)
