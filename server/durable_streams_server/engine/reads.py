"""Reading a stream: stitching fork ancestry, the Delta history and the in-memory tail.

A stream's sequence space is shared with its fork ancestry: sequence numbers below a
fork's ``fork_seq`` belong to its source (recursively), the rest to the fork. Within one
incarnation, messages below ``mem_base`` live only in Delta; the rest are in memory.
A read gathers whole messages until a byte budget is spent; a single message larger than
the budget is served in slices addressed by the offset's byte field.

Gathering yields *runs* of consecutive messages in the form their tier holds them
(``engine.runs``): Python lists of the memory tail's plain appends, the Arrow buffers of its
bulk appends, Arrow columns from Delta. Ordinary reads turn every run into
lists of bytes; Arrow reads (``read_slice`` + ``Run.columns``) turn every run into Arrow,
so history goes from the Delta scan to the response without a Python object per message.

Binary bodies (``read_body``): the plain read of a binary stream answers the messages' bytes
end to end, nothing per message, so its body is the runs' buffers (``Run.views``): views of
the Arrow buffers the Delta read decoded, written to the socket as they are. A read that
goes to Delta (history: a catch-up) gathers up to ``HISTORY_FACTOR`` times the read's budget:
each response costs a request, a hand-over to a storage thread and a plan step whatever its
size, which at 1 MiB per response was a third of a catch-up's time; the bytes themselves
cost one copy (Parquet page to column) and the socket's. What such a response holds -- the
decoded columns its views point into -- is bounded by that factor times the budget, and
reserved from the memory budget while gathered like any read's. While it is written, the next
response of a sequential catch-up is read ahead (``history.ReadAhead``, from ``_history``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from ..protocol.errors import BadRequest, Gone
from ..protocol.json_mode import frame
from ..protocol.offsets import Offset, encode_seq
from ..protocol.retention import STREAM_EARLIEST_OFFSET
from ..storage.history_rows import within_budget
from .engine import Engine
from .runs import COLUMNS, Run, StoredRun
from .stream import Stream
from .types import ReadResult


@dataclass(frozen=True, slots=True)
class Slice:
    """Whole messages from ``start`` (the first one cut at ``start.within``), as runs."""

    stream: Stream
    start: Offset
    next: Offset
    runs: list[Run]
    up_to_date: bool
    closed: bool

    @property
    def count(self) -> int:
        return sum(len(run) for run in self.runs)

    def columns(self) -> pa.Table:
        """All the messages as one table of ``COLUMNS``."""
        if not self.runs:
            return COLUMNS.empty_table()
        table = pa.concat_tables([run.columns() for run in self.runs])
        if self.start.within:
            data = table["data"]
            first = pa.array([data[0].as_py()[self.start.within :]], pa.binary())
            table = table.set_column(2, COLUMNS.field("data"), pa.chunked_array([first, *data.slice(1).chunks]))
        return table


HISTORY_FACTOR = 8
"""A binary body read from Delta carries up to this many times the read's budget (module docstring)."""


@dataclass(frozen=True, slots=True)
class Body:
    """A stream's messages from ``start`` as one body, the buffers written end to end: a binary
    stream's messages, or a JSON stream's framed as one array."""

    stream: Stream
    start: Offset
    next: Offset
    parts: list[bytes | memoryview]
    up_to_date: bool
    closed: bool


async def read_body(engine: Engine, stream: Stream, start: Offset, max_bytes: int) -> Body:
    """``read``'s messages as one binary body (the plain read of a binary stream): from the
    memory tail about ``max_bytes`` as ``read`` gathers them, from Delta (``start`` below the
    memory tail) up to ``HISTORY_FACTOR * max_bytes`` as views of what the read decoded; a
    first message larger than that is sliced."""
    found = read_now(engine, stream, start, max_bytes)
    if found is not None:
        parts: list[bytes | memoryview] = [b"".join(found.chunks)] if found.chunks else []
        return Body(stream, start, found.next, parts, found.up_to_date, found.closed)
    budget = max_bytes * HISTORY_FACTOR if start.seq < stream.mem_base else max_bytes
    sliced = await read_slice(engine, stream, start, budget)
    next_offset = sliced.next
    parts = [part for run in sliced.runs for part in run.views()]
    if parts:  # (the first part starts with the first message, cut at ``start.within``)
        first_size = sliced.runs[0].first_size() - start.within
        parts[0] = memoryview(parts[0])[start.within :]
        if first_size > budget:
            parts, next_offset = [parts[0][:budget]], Offset(start.seq, start.within + budget)
    up_to_date, closed = _at_tail(stream, next_offset)
    return Body(stream, start, next_offset, parts, up_to_date, closed)


async def read_json_body(engine: Engine, stream: Stream, start: Offset, max_bytes: int) -> Body:
    """``read``'s messages framed as one JSON array (the plain read of a JSON stream), as buffers:
    from the memory tail as ``read`` gathers them, from Delta each run's messages joined by Arrow
    (``Run.joined``: one copy, no Python object per message). No parts: no messages (the HTTP
    layer answers ``[]``). An offset inside a message, or a first message larger than
    ``max_bytes``, is read as ``read`` reads it (sliced)."""
    found = await read(engine, stream, start, max_bytes) if start.within else read_now(engine, stream, start, max_bytes)
    if found is None:
        sliced = await read_slice(engine, stream, start, max_bytes)
        if not sliced.runs or sliced.runs[0].first_size() <= max_bytes:
            return Body(stream, start, sliced.next, _json_array(sliced.runs), sliced.up_to_date, sliced.closed)
        found = _result(stream, start, sliced.runs, sliced.next, max_bytes, False)
    framed: list[bytes | memoryview] = [frame(found.chunks)] if found.chunks else []
    return Body(stream, start, found.next, framed, found.up_to_date, found.closed)


def _json_array(runs: list[Run]) -> list[bytes | memoryview]:
    """The messages of ``runs`` as the parts of one JSON array; none for no runs."""
    if not runs:
        return []
    parts: list[bytes | memoryview] = [b"["]
    for index, run in enumerate(runs):
        parts += [b",", *run.joined()] if index else run.joined()
    return [*parts, b"]"]


async def read(engine: Engine, stream: Stream, start: Offset, max_bytes: int, *, whole: bool = False) -> ReadResult:
    """Messages from ``start`` up to the visible tail, at most about ``max_bytes`` of them.

    A first message larger than ``max_bytes`` is sliced (the next offset then points inside
    it) unless ``whole`` asks for complete messages, as message-framed responses need.
    """
    found = read_now(engine, stream, start, max_bytes, whole=whole)
    if found is not None:
        return found
    sliced = await read_slice(engine, stream, start, max_bytes)
    return _result(stream, start, sliced.runs, sliced.next, max_bytes, whole)


def read_now(
    engine: Engine, stream: Stream, start: Offset, max_bytes: int, *, whole: bool = False
) -> ReadResult | None:
    """``read``'s answer when nothing needs waiting for: the stream's own in-memory tail holds
    the messages and the memory budget grants the read at once (most live reads). ``None``:
    ``read`` must do it."""
    check_start(engine, stream, start)
    if start.seq >= stream.visible_tail:
        return _result(stream, start, [], start, max_bytes, whole)
    if start.within or start.seq < stream.mem_base or (stream.fork_of is not None and start.seq < stream.fork_seq):
        return None  # (sliced, in Delta, or in the fork's source)
    reserved = engine.memory.reserve_now(max_bytes)
    if reserved is None:
        return None
    try:
        runs = stream.mem.runs(start.seq, stream.visible_tail, max_bytes, at_least_one=True)
        return _result(stream, start, runs, Offset(start.seq + sum(len(run) for run in runs), 0), max_bytes, whole)
    finally:
        engine.memory.release(reserved)


def _result(
    stream: Stream, start: Offset, runs: list[Run], next_offset: Offset, max_bytes: int, whole: bool
) -> ReadResult:
    """The messages of ``runs`` as a reader gets them: the first one cut at ``start.within``,
    and sliced to ``max_bytes`` when larger unless ``whole``."""
    chunks: list[bytes] = []
    stamps: list[int] = []
    for run in runs:
        data, times = run.lists()
        chunks += data
        stamps += times
    if chunks:
        chunks[0] = chunks[0][start.within :]
        if len(chunks[0]) > max_bytes and not whole:
            chunks, stamps = [chunks[0][:max_bytes]], stamps[:1]
            next_offset = Offset(start.seq, start.within + max_bytes)
    up_to_date, closed = _at_tail(stream, next_offset)
    return ReadResult(
        stream=stream,
        start=start,
        next=next_offset,
        chunks=chunks,
        stamps=stamps,
        up_to_date=up_to_date,
        closed=closed,
    )


async def read_slice(
    engine: Engine, stream: Stream, start: Offset, max_bytes: int, *, stop: int | None = None
) -> Slice:
    """Whole messages from ``start`` up to the visible tail (or before message ``stop``), at
    most about ``max_bytes``."""
    check_start(engine, stream, start)
    end = stream.visible_tail if stop is None else min(stop, stream.visible_tail)
    runs: list[Run] = []
    next_offset = start
    if start.seq < end:
        async with engine.memory.reading(max_bytes + start.within):
            runs = await _gather(engine, stream, start.seq, end, max_bytes + start.within)
        if start.within and start.within >= runs[0].first_size():
            # (an offset we handed out points inside its message; this one was made up)
            raise BadRequest(f"offset {start} points past the end of its message", code="OFFSET_OUT_OF_RANGE")
        next_offset = Offset(start.seq + sum(len(run) for run in runs), 0)
    up_to_date, closed = _at_tail(stream, next_offset)
    return Slice(stream, start, next_offset, runs, up_to_date, closed)


def _at_tail(stream: Stream, next_offset: Offset) -> tuple[bool, bool]:
    at_tail = next_offset.seq == stream.visible_tail and next_offset.within == 0
    return at_tail, at_tail and stream.visible_closed


def check_start(engine: Engine, stream: Stream, start: Offset) -> None:
    """410 below the retained history, 400 beyond the tail: before any response starts."""
    earliest = engine.earliest_readable(stream)
    if start.seq < earliest:
        raise Gone(
            f"offset {start} is older than the earliest retained offset {encode_seq(earliest)}: "
            "re-initialize from /bootstrap",
            code="OFFSET_GONE",
            headers={STREAM_EARLIEST_OFFSET: encode_seq(earliest)},
        )
    tail = stream.visible_tail
    if start.seq > tail or (start.seq == tail and start.within != 0):
        raise BadRequest(f"offset {start} is beyond the tail of the stream", code="OFFSET_OUT_OF_RANGE")


async def _gather(engine: Engine, stream: Stream, start: int, end: int, budget: int) -> list[Run]:
    """Whole messages ``start..end`` (at least one) until ``budget`` bytes are reached."""
    runs: list[Run] = []
    if start < stream.fork_seq and stream.fork_of is not None:
        source = engine.by_uid[stream.fork_of]
        runs = await _gather(engine, source, start, min(end, stream.fork_seq), budget)
        start += sum(len(run) for run in runs)
        budget -= sum(run.nbytes() for run in runs)
        if start < stream.fork_seq or budget <= 0:
            return runs
    # History below mem_base is in Delta, the rest in memory; a flush may move mem_base
    # while a Delta read is awaited, so re-check it on every round.
    while start < end and (not runs or budget > 0):
        if start < stream.mem_base:
            table, short = await _history(engine, stream, start, end, budget)
            table = table.slice(0, min(end, stream.mem_base) - start)
            seqs = table["seq"]
            if not len(seqs) or seqs[0].as_py() != start or seqs[-1].as_py() != start + len(seqs) - 1:
                raise RuntimeError(f"stream {stream.name!r}: messages from {start} missing from Delta")
            kept, size = within_budget(table["data"], budget, at_least_one=not runs)
            runs.append(StoredRun(table.slice(0, kept)))
            start += kept
            budget -= size
            if kept < len(seqs) or short:
                break  # the budget is spent, or the read stopped short (see history_reader)
            continue
        runs += stream.mem.runs(start, end, budget, at_least_one=not runs)
        break
    return runs


async def _history(engine: Engine, stream: Stream, start: int, end: int, budget: int) -> tuple[pa.Table, bool]:
    """Messages from ``start`` (before ``end``, at most the memory tail) within ``budget``: from
    the history cache (read there ahead of this request, ``history.ReadAhead``, or by an earlier
    one), or read from Delta, which reads about ``budget`` bytes wherever ``start`` is
    (``storage.history_reader``); and whether that read stopped short of both the budget and its
    end (many small files: the response ends there)."""
    uid, stop = stream.uid, min(end, stream.mem_base)
    await engine.read_ahead.arrived(uid, start)
    table = engine.history.get(uid, start)
    short = False
    if table is None:
        table = await engine.storage.read_history(uid, start, stop, budget)
        engine.history.put(uid, table)
        short = start + table.num_rows < stop and table["data"].nbytes < budget
    if not short:
        first = start <= engine.earliest_readable(stream)
        engine.read_ahead.follow(uid, start, start + table.num_rows, stop, budget, first=first)
    return table, short


async def wait_for_change(
    stream: Stream,
    seq: int,
    timeout_s: float,
    at_wake: Callable[[], object] | None = None,
    *,
    until: asyncio.Future[None] | None = None,
) -> bool:
    """Wait until data beyond ``seq`` is visible, the stream closes or goes away.

    Returns ``False`` on timeout, or once ``until`` is done (the server is stopping: the
    reader is answered now, as at a timeout, rather than held until its connection is cut).
    Waiters are woken by ``Engine.on_durable``; nothing polls.
    The wake resolves the very future this task awaits (no ``wait_for`` in between, which
    would cost two more turns of the loop before the reader runs); a timer ends the wait.
    ``at_wake`` runs at the wake itself, before this returns (``Stream.wake``).
    """
    if stream.visible_tail > seq or stream.visible_closed:
        return True
    if until is not None and until.done():
        return False
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    expired = False

    def expire(_: object = None) -> None:
        nonlocal expired
        if not waiter.done():
            expired = True
            waiter.set_result(None)

    stream.waiters[waiter] = at_wake
    timer = loop.call_later(timeout_s, expire)
    if until is not None:
        until.add_done_callback(expire)
    try:
        await waiter
    finally:
        timer.cancel()
        if until is not None:
            until.remove_done_callback(expire)
        stream.waiters.pop(waiter, None)
    return not expired
