"""Bulk appends: our server's multi-message append extension (README "Bulk appends").

A bulk append is a POST with ``Content-Type: application/vnd.apache.arrow.stream`` and
``Stream-Bulk-Content-Type: <the stream's content type>`` whose body is an Arrow IPC stream
with one ``data`` (binary) column: one row per message, each stored as its own message with
its own offset, byte for byte. Servers that offer it say so in HEAD (``Stream-Bulk-Append``);
a server that does not know it answers a bulk append 4xx (its content type is not the
stream's) and stores nothing, so callers probe first and fall back to plain appends.

``body`` is a pure function of the messages: the same messages give the same bytes (the
sink's exactly-once design rests on that). This module needs ``pyarrow``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from .models import ARROW_STREAM

CONTENT_TYPE_HEADER = "Stream-Bulk-Content-Type"
ADVERTISED_HEADER = "Stream-Bulk-Append"
_SCHEMA = pa.schema([pa.field("data", pa.binary())])


def headers(content_type: str) -> dict[str, str]:
    """The request headers of a bulk append to a stream of ``content_type``."""
    return {"Content-Type": ARROW_STREAM, CONTENT_TYPE_HEADER: content_type}


def body(messages: pa.Array | Sequence[bytes]) -> bytes:
    """An Arrow IPC stream of one record batch holding the messages (binary, no nulls)."""
    array = messages if isinstance(messages, pa.Array) else pa.array(list(messages), pa.binary())
    if not pa.types.is_binary(array.type):
        array = array.cast(pa.binary())
    if not len(array):
        raise ValueError("a bulk append needs at least one message")
    if array.null_count:
        raise ValueError("a bulk append's messages cannot be null")
    array = _compact(array)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, _SCHEMA) as writer:
        writer.write_batch(pa.record_batch([array], schema=_SCHEMA))
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _compact(array: pa.BinaryArray) -> pa.BinaryArray:
    """The same messages in buffers of their own (offsets from 0, exactly their values, no
    validity bitmap), so the body does not depend on what else shared the input's buffers."""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=len(array) + 1, offset=array.offset * 4)
    start, end = int(offsets[0]), int(offsets[-1])
    values = array.buffers()[2]
    compact = pa.Array.from_buffers(
        pa.binary(),
        len(array),
        [
            None,
            pa.py_buffer((offsets - start).astype(np.int32).tobytes()),
            values.slice(start, end - start) if values else pa.py_buffer(b""),
        ],
    )
    assert isinstance(compact, pa.BinaryArray)
    return compact
