"""Rows of the source: one Arrow record batch per run of messages, typed as the declared schema.

Messages (multipart and plain reads) are collected row by row; Arrow responses (our server's
read extension) are turned into rows column-wise with Arrow compute, with no Python object
per message. Columns: ``stream``, ``offset`` (the message's own), ``value`` (binary or text),
``content_type``, ``timestamp``, and any user column, parsed from the JSON message's
top-level field of that name (null where missing or of another type).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, StructType

from ..client import Message
from ..client.arrow import ArrowSlice
from .offsets import first_excluded, seq_offsets, starts_inside

METADATA_COLUMNS = ("stream", "offset", "value", "content_type", "timestamp")
BATCH_ROWS = 8192
_BATCH_BYTES = 16 * 1024 * 1024


class RowBuilder:
    """Columns of one Arrow record batch, typed exactly as the declared schema."""

    def __init__(self, schema: StructType, key: str) -> None:
        self.schema = schema
        self.arrow_schema = arrow_schema(schema)
        self.key = key
        self.parsed = [f.name for f in schema.fields if f.name not in METADATA_COLUMNS]
        self.value_binary = any(f.name == "value" and isinstance(f.dataType, BinaryType) for f in schema.fields)
        self._constants: dict[str, tuple[str, pa.Array]] = {}
        """By column: its value and the longest column of it made so far (``constant``)."""
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
                arrays.append(self.constant(name, self.key if name == "stream" else found.content_type, count))
            elif name == "offset":
                offsets = seq_offsets(table["seq"])
                if starts_inside(found.start):
                    # The first message was read from inside: its row starts where the read did.
                    offsets = pa.concat_arrays([pa.array([found.start]), offsets[1:]])
                arrays.append(offsets)
            elif name == "value":
                arrays.append(data if self.value_binary else _utf8(data))
            elif name == "timestamp":
                arrays.append(table["ts"].cast(field.type))
            else:
                arrays.append(_array([document.get(name) for document in parsed], field.type))
        batch = pa.RecordBatch.from_arrays([_one_chunk(array) for array in arrays], schema=self.arrow_schema)
        yield from (batch.slice(at, BATCH_ROWS) for at in range(0, count, BATCH_ROWS))

    def constant(self, name: str, value: str, count: int) -> pa.Array:
        """The column ``name`` of ``count`` copies of ``value``: a slice of the one made for the
        longest such column so far. Arrow arrays never change, so batch after batch shares it
        rather than making its own (a 40-byte stream key: 40 MB a million rows)."""
        made = self._constants.get(name)
        if made is None or made[0] != value or len(made[1]) < count:
            made = self._constants[name] = (value, pa.repeat(pa.scalar(value, pa.string()), count))
        column = made[1]
        return column if len(column) == count else column.slice(0, count)

    def full(self) -> bool:
        return self.count >= BATCH_ROWS or self.bytes >= _BATCH_BYTES

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
    """The column as one array. A chunked array of one chunk is that chunk: ``combine_chunks``
    would copy it (every value of the batch, once more, for nothing)."""
    if not isinstance(array, pa.ChunkedArray):
        return array
    return array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()


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
