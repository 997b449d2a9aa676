"""What one Spark task of the source does: read ``[start, end)`` of one stream into Arrow.

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
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, StructType

from ._offsets import EARLIEST, first_excluded, seq_offsets, starts_inside
from .client import Client, Gone, Message, Stream
from .client.arrow import ArrowSlice
from .client.models import is_json
from .options import ConnectionOptions, ReadOptions

log = logging.getLogger("pyspark_durable_streams.source")

METADATA_COLUMNS = ("stream", "offset", "value", "content_type", "timestamp")
_BATCH_ROWS = 8192
_BATCH_BYTES = 16 * 1024 * 1024
_CONVERGE_ATTEMPTS = 8


Framing = Literal["arrow", "multipart", "plain"]
"""How a server answers reads: Arrow or multipart (our extensions: every message with its
own offset), or plain bodies (offsets only at response edges)."""


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
    framing: Framing


def make_client(connection: ConnectionOptions, base_url: str | None = None) -> Client:
    """A client for full stream URLs (``base_url`` matters only for bucket listings)."""
    timeout = connection.timeout_s
    base = base_url or "http://127.0.0.1"
    return Client(
        base,
        headers=dict(connection.headers),
        timeout=(min(10.0, timeout), timeout),
        verify=connection.ca_cert_file,
    )


def read_range(options: ReadOptions, schema: StructType, part: StreamRange) -> Iterator[pa.RecordBatch]:
    if part.end <= part.start:
        return
    client = make_client(options.connection)
    try:
        stream = client.stream(part.url)
        items = (
            _without_boundaries(stream, part) if part.framing == "plain" else _with_boundaries(stream, part, options)
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
            raise DataLossError(gone_message(part.key, track.offset, exc)) from exc
    position = track.offset
    # 410: history before ``position`` was dropped (a snapshot moved the retention point).
    with stream.bootstrap() as boot:
        snapshot = boot.snapshot.offset if boot.snapshot is not None else None
        log.warning(
            "durable_streams: stream %s: offset %s is no longer retained (410 Gone); re-initialized from "
            "/bootstrap: messages before the snapshot offset %s were skipped and the snapshot itself is "
            "not emitted (failOnDataLoss=false)",
            part.key,
            position,
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


def _without_boundaries(stream: Stream, part: StreamRange) -> Iterator[Message]:
    for _ in range(_CONVERGE_ATTEMPTS):
        suffix, tail_a = _collect(stream, part.end)
        items, tail_b = _collect(stream, part.start)
        if tail_a == tail_b:
            break
    else:
        raise DataLossError(f"stream {part.key}: appends keep racing the read of [{part.start}, {part.end})")
    if tail_b < part.end:
        raise DataLossError(f"stream {part.key}: the batch needs data up to {part.end}, the stream ends at {tail_b}")
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


def _collect(stream: Stream, offset: str) -> tuple[list[Message], str]:
    with stream.read(offset, boundaries=False) as reader:
        items = list(reader)
        return items, reader.offset


def gone_message(key: str, offset: str, exc: BaseException) -> str:
    return (
        f"stream {key}: offset {offset} is no longer retained by the server (410 Gone: a snapshot moved "
        f"the earliest retained offset past it), so messages were lost to this query. Set option "
        f"failOnDataLoss=false to continue from the stream's /bootstrap (messages before the snapshot are "
        f"skipped and the snapshot itself is not emitted), or restart the query with a new checkpoint "
        f"(startingOffsets=earliest starts from the bootstrap). Server said: {exc}"
    )


# -- rows --------------------------------------------------------------------------------------


class RowBuilder:
    """Columns of one Arrow record batch, typed exactly as the declared schema."""

    def __init__(self, schema: StructType, key: str) -> None:
        self.schema = schema
        self.arrow_schema = arrow_schema(schema)
        self.key = key
        self.parsed = [f.name for f in schema.fields if f.name not in METADATA_COLUMNS]
        self.value_binary = any(f.name == "value" and isinstance(f.dataType, BinaryType) for f in schema.fields)
        self._reset()

    def _reset(self) -> None:
        self.columns: dict[str, list[Any]] = {name: [] for name in self.schema.fieldNames()}
        self.count = 0
        self.bytes = 0

    def add(self, message: Message) -> None:
        columns = self.columns
        if "stream" in columns:
            columns["stream"].append(self.key)
        if "offset" in columns:
            columns["offset"].append(message.offset)
        if "value" in columns:
            value: Any = message.data
            columns["value"].append(value if self.value_binary else value.decode("utf-8", errors="replace"))
        if "content_type" in columns:
            columns["content_type"].append(message.content_type)
        if "timestamp" in columns:
            ms = message.timestamp_ms
            columns["timestamp"].append(ms * 1000 if ms is not None else None)
        if self.parsed:
            document = _document(message.data)
            for name in self.parsed:
                columns[name].append(document.get(name))
        self.count += 1
        self.bytes += len(message.data)

    def arrow_batches(self, found: ArrowSlice, end: str) -> Iterator[pa.RecordBatch]:
        """The rows of an Arrow response before ``end``, built column by column."""
        table = found.table
        if table.num_rows:
            first = table["seq"][0].as_py()
            table = table.slice(0, max(0, first_excluded(end) - first)).combine_chunks()
        if not table.num_rows:
            return
        count, data = table.num_rows, table["data"]
        parsed = [_document(value) for value in data.to_pylist()] if self.parsed else []
        arrays = []
        for field in self.arrow_schema:
            name = field.name
            if name in ("stream", "content_type"):
                constant = self.key if name == "stream" else found.content_type
                arrays.append(pc.fill_null(pa.nulls(count, pa.string()), constant))
            elif name == "offset":
                offsets = seq_offsets(table["seq"])
                if starts_inside(found.start):
                    # The first message was read from inside: its row starts where the read did.
                    offsets = pa.concat_arrays([pa.array([found.start]), offsets.chunk(0)[1:]])
                arrays.append(offsets)
            elif name == "value":
                arrays.append(data if self.value_binary else _utf8(data))
            elif name == "timestamp":
                arrays.append(table["ts"].cast(field.type))
            else:
                arrays.append(_array([document.get(name) for document in parsed], field.type))
        batch = pa.RecordBatch.from_arrays([_one_chunk(array) for array in arrays], schema=self.arrow_schema)
        yield from (batch.slice(at, _BATCH_ROWS) for at in range(0, count, _BATCH_ROWS))

    def full(self) -> bool:
        return self.count >= _BATCH_ROWS or self.bytes >= _BATCH_BYTES

    def flush(self) -> pa.RecordBatch:
        arrays = [_array(self.columns[field.name], field.type) for field in self.arrow_schema]
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)
        self._reset()
        return batch


def _document(data: bytes) -> dict[str, Any]:
    """The JSON object a message holds, or an empty one (its fields then read as null)."""
    try:
        document = json.loads(data)
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}


def _utf8(data: pa.ChunkedArray) -> pa.ChunkedArray | pa.Array:
    """Binary as text; invalid UTF-8 decodes with replacement characters, as ``RowBuilder.add`` does."""
    try:
        return data.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([value.decode("utf-8", errors="replace") for value in data.to_pylist()], pa.string())


def _one_chunk(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark checks batches against (timestamps in UTC, as its reader does)."""
    try:
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # pragma: no cover - older pyspark without the timezone keyword
        return to_arrow_schema(schema)


def _array(values: list[Any], arrow_type: pa.DataType) -> pa.Array:
    try:
        return pa.array(values, type=arrow_type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        # A parsed JSON field whose values do not fit the declared type: null where they don't.
        return pa.array([_one(value, arrow_type) for value in values], type=arrow_type)


def _one(value: Any, arrow_type: pa.DataType) -> Any:
    try:
        pa.array([value], type=arrow_type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    return value
