"""What one Spark task of the source does: read ``[start, end)`` of one stream into Arrow.

(The rows themselves are built by ``rows.RowBuilder``.)

Runs on executors. Everything it needs is in the partition and the (pickled) options, and
nothing is kept between calls. Three ways of reading, chosen on the driver per server:

* **arrow** (our server: the ``application/vnd.apache.arrow.stream`` extension): each
  response is an Arrow table of (sequence number, append time, bytes), read with an ``end``
  so the server sends nothing beyond the range, and the rows are built column-wise with
  Arrow compute: no Python object per message.
* **multipart** (the ``multipart/mixed`` extension): every message arrives with its own
  offset, so the range is read from ``start`` and cut exactly before the first message whose
  offset is ``>= end``.
* **no boundaries** (e.g. the reference Node server): a response carries many messages and
  only its end offset, and runs to the tail as it is *now*. The range is recovered exactly
  by reading both from ``start`` and from ``end`` until both reads reach the same tail, and
  dropping the suffix the second read returned. Only the first item of a response has a
  known offset; the others get a null ``offset``.

A ``410 Gone`` (history the range needs was let go) is data loss in every way:
``DataLossError`` under ``failOnDataLoss=true``; under ``false`` the range goes on from what
the server still holds (its ``/bootstrap``, or, without boundaries, the earliest retained
offset the ``410`` names), and what was skipped is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from .._connect import connect
from ..client import Gone, Message, ReadFraming, Stream
from ..client.arrow import ArrowSlice
from ..client.models import is_json
from ..options import ReadOptions
from .offsets import EARLIEST, is_seq_offset, seq_of
from .rows import RowBuilder

log = logging.getLogger("pyspark_durable_streams.source")

_CONVERGE_ATTEMPTS = 8


class DataLossError(RuntimeError):
    """Messages the query needs are no longer on the server (``410 Gone`` or a shorter stream)."""


@dataclass(frozen=True)
class StreamRange(InputPartition):
    """Messages of one stream from ``start`` (inclusive) to ``end`` (exclusive)."""

    key: str
    """The ``stream`` column: the URL, or the bucket-local id of a subscription."""
    url: str
    start: str
    end: str
    framing: ReadFraming
    """How the server answers reads (``Stream.read_framing``, asked once on the driver)."""


def read_range(options: ReadOptions, schema: StructType, part: StreamRange) -> Iterator[pa.RecordBatch]:
    if part.end <= part.start:
        return
    client = connect(options.connection, part.url)
    try:
        stream = client.stream(part.url)
        items = (
            _without_boundaries(stream, part, options)
            if part.framing == "plain"
            else _with_boundaries(stream, part, options)
        )
        rows = RowBuilder(schema, part.key)
        for item in items:
            if isinstance(item, ArrowSlice):
                if rows.count:
                    yield rows.flush()
                yield from rows.arrow_batches(item, part.end)
                continue
            rows.add(item)
            if rows.full():
                yield rows.flush()
        if rows.count:
            yield rows.flush()
    finally:
        client.close()


# -- reading ---------------------------------------------------------------------------------


def _with_boundaries(stream: Stream, part: StreamRange, options: ReadOptions) -> Iterator[Message | ArrowSlice]:
    track = _Position(part.start)
    try:
        yield from _until(stream, part.start, part, track)
        return
    except Gone as exc:
        if options.fail_on_data_loss and part.start != EARLIEST:
            raise DataLossError(gone_message(part.key, track.offset, part.end, exc)) from exc
        gone = exc
    position = track.offset
    # 410: history before ``position`` was dropped (a snapshot or a retention policy moved the point).
    with stream.bootstrap() as boot:
        snapshot = boot.snapshot.offset if boot.snapshot is not None else None
        log.warning(
            "durable_streams: stream %s: offset %s is no longer retained (410 Gone): %s skipped; re-initialized "
            "from /bootstrap (snapshot offset %s, not emitted) (failOnDataLoss=false)",
            part.key,
            position,
            lost_messages(position, part.end, gone),
            snapshot,
        )
        for message in boot.messages:
            if message.offset is not None and message.offset >= part.end:
                return
            if message.offset is not None and message.offset < position:
                continue
            yield message
            position = message.next_offset or position
        position = max(position, boot.next_offset)
    if position < part.end:
        yield from _until(stream, position, part, _Position(position))


class _Position:
    def __init__(self, offset: str) -> None:
        self.offset = offset


def _until(stream: Stream, start: str, part: StreamRange, track: _Position) -> Iterator[Message | ArrowSlice]:
    """Messages from ``start`` up to (not including) the first at or beyond ``part.end``
    (Arrow responses may run past it: ``RowBuilder.arrow_batches`` cuts them)."""
    if part.framing == "arrow":
        arrow = stream.read_arrow(start, end=part.end)
        for found in arrow:
            yield found
            track.offset = found.next_offset
        reached = arrow.offset
    else:
        with stream.read(start) as reader:
            for message in reader:
                if message.offset is not None and message.offset >= part.end:
                    return
                yield message
                track.offset = message.next_offset or track.offset
            reached = reader.offset
    if reached < part.end:
        raise DataLossError(
            f"stream {part.key}: the batch needs messages up to offset {part.end} but the stream ends at "
            f"{reached} (was it deleted and created again?)"
        )


def _without_boundaries(stream: Stream, part: StreamRange, options: ReadOptions) -> Iterator[Message]:
    try:
        items, suffix = _converged(stream, part)
    except Gone as exc:
        if options.fail_on_data_loss and part.start != EARLIEST:
            raise DataLossError(gone_message(part.key, part.start, part.end, exc)) from exc
        earliest = exc.earliest_offset
        if earliest is None or earliest <= part.start:
            remedy = (
                "The server named no later earliest retained offset to go on from (failOnDataLoss=false): restart "
                "the query with a new checkpoint."
            )
            raise DataLossError(gone_message(part.key, part.start, part.end, exc, remedy)) from exc
        log.warning(
            "durable_streams: stream %s: offset %s is no longer retained (410 Gone): %s skipped; going on from the "
            "earliest retained offset %s (failOnDataLoss=false)",
            part.key,
            part.start,
            lost_messages(part.start, part.end, exc),
            earliest,
        )
        if earliest < part.end:
            yield from _without_boundaries(stream, replace(part, start=earliest), options)
        return
    if not items:
        return
    if is_json(items[0].content_type):
        kept = items[: len(items) - len(suffix)]
        yield from kept
        return
    # Bytes without boundaries: everything in the range, as one row per at most 4 MiB.
    data = b"".join(item.data for item in items)
    data = data[: len(data) - sum(len(item.data) for item in suffix)]
    step = 4 * 1024 * 1024
    for at in range(0, len(data), step):
        yield Message(data[at : at + step], items[0].content_type, part.start if at == 0 else None, None)


def _converged(stream: Stream, part: StreamRange) -> tuple[list[Message], list[Message]]:
    """What reads from ``start`` and from ``end`` return once both reach the same tail."""
    for _ in range(_CONVERGE_ATTEMPTS):
        suffix, tail_a = _collect(stream, part.end)
        items, tail_b = _collect(stream, part.start)
        if tail_a == tail_b:
            break
    else:
        raise DataLossError(f"stream {part.key}: appends keep racing the read of [{part.start}, {part.end})")
    if tail_b < part.end:
        raise DataLossError(f"stream {part.key}: the batch needs data up to {part.end}, the stream ends at {tail_b}")
    return items, suffix


def _collect(stream: Stream, offset: str) -> tuple[list[Message], str]:
    with stream.read(offset, boundaries=False) as reader:
        items = list(reader)
        return items, reader.offset


def lost_messages(offset: str, end: str, exc: Gone) -> str:
    """How many messages of ``[offset, end)`` the server no longer retains, as a phrase."""
    earliest = exc.earliest_offset
    if earliest is not None and all(is_seq_offset(each) for each in (offset, end, earliest)):
        upto = min(earliest, end)
        count = seq_of(upto) - seq_of(offset)
        return f"{count} message{'s' if count != 1 else ''} ({offset} up to {upto})"
    return f"the messages from {offset} up to {earliest or 'the earliest retained offset'}"


_GONE_REMEDY = (
    "Set option failOnDataLoss=false to continue from the stream's /bootstrap (its earliest retained offset: the "
    "messages before it are skipped, and a snapshot is not emitted), or restart the query with a new checkpoint "
    "(startingOffsets=earliest starts from the bootstrap)."
)


def gone_message(key: str, offset: str, end: str, exc: Gone, remedy: str = _GONE_REMEDY) -> str:
    """The data loss of a ``410`` at ``offset``: what was lost, then what to do (``remedy``)."""
    return (
        f"stream {key}: offset {offset} is no longer retained by the server (410 Gone: a snapshot or the "
        f"stream's retention policy moved the earliest retained offset past it), so {lost_messages(offset, end, exc)} "
        f"were lost to this query. {remedy} Server said: {exc}"
    )
