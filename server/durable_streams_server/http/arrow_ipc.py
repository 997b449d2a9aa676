"""Extension: a read with ``Accept: application/vnd.apache.arrow.stream`` answers Arrow.

The body is an Arrow IPC stream of the messages in the range, columns ``seq`` (int64: the
message's sequence number, so its offset is ``encode_seq(seq)``; a first message read from
inside, at an offset with a byte position, starts at the request's offset instead), ``ts``
(timestamp[us, UTC]: append time) and ``data`` (binary: the exact bytes, the first message
cut at the request's byte position). The stream's content type is the schema metadata
``content_type``. Every other header is that of any read (``Stream-Next-Offset``,
``Stream-Up-To-Date``, ``Stream-Closed``, cursor, ETag), live long-poll included.
A parameter ``end=<offset>`` stops the response before the first message whose own offset
is at or after it, so a reader of a bounded range (a Spark partition) is not sent the
messages beyond it.

It exists for readers that move many messages, such as the Spark source: history goes from
the Delta scan to the socket and on into Spark's Arrow batches without a Python object per
message on either side. Messages are always whole, and a response carries up to
``BUDGET_FACTOR`` times the server's ``max_read_bytes``: per-request costs dominate small
responses, and a reader asking for Arrow wants bulk.
"""

from __future__ import annotations

import pyarrow as pa

from ..engine.reads import Slice
from ..protocol.offsets import parse_offset

ARROW_STREAM = "application/vnd.apache.arrow.stream"
BUDGET_FACTOR = 8


def wants_arrow(accept: str | None) -> bool:
    return accept is not None and ARROW_STREAM in accept.lower()


def stop_seq(end: str | None) -> int | None:
    """The first message the ``end`` parameter excludes (``400`` when it is not an offset)."""
    if end is None:
        return None
    offset = parse_offset(end)
    return offset.seq + (1 if offset.within else 0)


def body(found: Slice, content_type: str) -> memoryview:
    """The IPC stream of ``found``'s messages (an empty stream still carries the schema).

    Written twice: first to a stream that only counts (no bytes copied), then into a buffer
    of exactly that size. A growing ``BufferOutputStream`` reallocates and copies as the body
    grows: a million 100-byte messages read in 8-10 MB responses took 470-500 ms of the
    server's CPU with one, 420-460 ms this way."""
    table = found.columns().replace_schema_metadata({"content_type": content_type})
    counted = pa.MockOutputStream()
    _write(counted, table)
    buffer = pa.allocate_buffer(counted.size())
    writer = pa.FixedSizeBufferWriter(buffer)
    _write(writer, table)
    if writer.tell() != buffer.size:  # (never: the same table written the same way; but an unwritten
        # byte of the buffer would be whatever the allocator left there, so it is checked, not assumed)
        raise AssertionError(f"Arrow IPC body of {writer.tell()} bytes, {buffer.size} counted")
    return memoryview(buffer)


def _write(sink: pa.NativeFile, table: pa.Table) -> None:
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
