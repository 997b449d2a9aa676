"""Bulk appends (extension): many messages in one request, as an Arrow IPC stream.

A POST whose ``Content-Type`` is ``application/vnd.apache.arrow.stream`` and which names
the stream's content type in ``Stream-Bulk-Content-Type`` carries one message per row of
the body's record batches: the column ``data`` (``binary`` or ``large_binary``) holds each
message's exact bytes. Without that header the body is an ordinary message of an Arrow
stream (the base protocol); a server that does not know the header sees a request whose
content type does not match the stream's (``409``), so it stores nothing.

Everything here is pure: parsing the body into one binary array and checking that every
message is one the stream may store (not null, not empty; valid JSON on JSON streams).
A refused row is named by its index, so a client can tell which message was wrong.
"""

from __future__ import annotations

import collections

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from .errors import BadRequest

ARROW_STREAM = "application/vnd.apache.arrow.stream"
BULK_CONTENT_TYPE = "Stream-Bulk-Content-Type"
"""Request header of a bulk append: the content type of the stream's messages."""
BULK_APPEND = "Stream-Bulk-Append"
"""Response header (HEAD, create): the bulk append formats this server accepts."""
DATA_COLUMN = "data"


def parse_body(body: bytes) -> pa.BinaryArray:
    """The messages of a bulk append body, as one ``binary`` array (no copy per message)."""
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(body))
        table = reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        raise BadRequest(f"the bulk append body is not an Arrow IPC stream: {exc}", code="INVALID_BULK_BODY") from exc
    if DATA_COLUMN not in table.column_names:
        raise BadRequest(
            f"a bulk append's Arrow stream needs a {DATA_COLUMN!r} column (binary), one message per row",
            code="INVALID_BULK_BODY",
        )
    column = table.column(DATA_COLUMN)
    if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        raise BadRequest(
            f"the {DATA_COLUMN!r} column of a bulk append must be binary or large_binary, not {column.type}",
            code="INVALID_BULK_BODY",
        )
    if column.num_chunks == 1 and pa.types.is_binary(column.type):
        array = column.chunk(0)
    else:
        try:
            array = column.combine_chunks().cast(pa.binary())
        except (pa.ArrowInvalid, pa.ArrowCapacityError) as exc:
            raise BadRequest(
                f"a bulk append's messages are too large together: {exc}", code="INVALID_BULK_BODY"
            ) from exc
    assert isinstance(array, pa.BinaryArray)
    return array


def check_messages(messages: pa.BinaryArray, *, json_stream: bool) -> None:
    """Refuse the whole batch if any message may not be stored; name the first such row."""
    if len(messages) == 0:
        raise BadRequest("a bulk append needs at least one message", code="EMPTY_BATCH")
    if messages.null_count:
        row = _first(pc.is_null(messages))
        raise BadRequest(f"row {row} of the bulk append is null: every row is a message", code="NULL_MESSAGE")
    lengths = pc.binary_length(messages)
    if pc.min(lengths).as_py() == 0:
        row = _first(pc.equal(lengths, 0))
        raise BadRequest(
            f"row {row} of the bulk append is empty: the protocol stores no empty messages", code="EMPTY_MESSAGE"
        )
    if json_stream:
        _check_json(messages)


def _first(mask: pa.BooleanArray) -> int:
    return int(pc.index(mask, True).as_py())


def _check_json(messages: pa.BinaryArray) -> None:
    """Each message must be one JSON value in UTF-8 (RFC 8259: no NaN, no trailing data),
    checked by orjson's parser, called from C over the batch (no Python loop per message);
    only a failure walks the messages again to name the row."""
    values = messages.to_pylist()
    try:
        collections.deque(map(orjson.loads, values), maxlen=0)
    except orjson.JSONDecodeError:
        for row, message in enumerate(values):
            try:
                orjson.loads(message)
            except orjson.JSONDecodeError as exc:
                raise BadRequest(
                    f"row {row} of the bulk append is not valid JSON: {exc}", code="INVALID_JSON"
                ) from None
        raise  # (not reached: the same message fails again)
