"""Rows → message bytes → request bodies, deterministically.

The exactly-once guarantee of the sink rests on this module being a pure function of the rows
in order: the same rows in the same order always give byte-identical request bodies, cut at
the same places, so a retried task sends what the first attempt sent under the same
``Producer-Seq`` numbers. Nothing here looks at time, randomness or how fast the server answers.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..client import bulk
from ..client.models import is_json


class PayloadError(ValueError):
    """A row cannot become a message of its target stream."""


def row_messages(batch: pa.RecordBatch, *, value_column: str | None, json_columns: Sequence[str]) -> pa.Array:
    """One message per row (binary; null where the value is null): the ``value`` column's bytes
    (a string's UTF-8, taken without copying), or with ``value_column=None`` the row's
    ``json_columns`` as one compact JSON object."""
    if value_column is not None:
        return batch.column(value_column).cast(pa.binary())
    selected = batch.select(list(json_columns))
    rows = selected.to_pylist()
    if all(_plain(field.type) for field in selected.schema):
        # Integers, strings and booleans are already what to_json writes: only drop the nulls.
        documents: Iterable[dict[str, Any]] = ({k: v for k, v in row.items() if v is not None} for row in rows)
    else:
        documents = (_clean(row) for row in rows)
    return pa.array([_encode(document).encode("utf-8") for document in documents], pa.binary())


_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def _plain(arrow_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(arrow_type)
        or pa.types.is_boolean(arrow_type)
        or pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
    )


def _clean(value: Any) -> Any:
    """Spark's JSON of a row (as ``to_json``): null fields dropped, maps as objects, binary as
    base64, dates/timestamps ISO-8601, decimals as numbers, NaN/±Infinity as strings."""
    if isinstance(value, dict):
        return {key: _clean(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        if value and all(isinstance(item, tuple) and len(item) == 2 for item in value):  # a map
            return {str(key): _clean(item) for key, item in value}
        return [_clean(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def checked_messages(messages: pa.Array, *, json_stream: bool, url: str) -> pa.Array:
    """The messages as stored: JSON streams store a null value as ``null``; byte streams can
    store neither a null nor an empty message, so those fail the task."""
    if json_stream:
        return pc.fill_null(messages, pa.scalar(b"null", messages.type)) if messages.null_count else messages
    if messages.null_count:
        raise PayloadError(f"a row has a null 'value' for the byte stream {url}: only JSON streams can store null")
    if len(messages) and pc.min(pc.binary_length(messages)).as_py() == 0:
        raise PayloadError(f"a row has an empty 'value' for {url}: the protocol does not store empty messages")
    return messages


class RequestCutter:
    """Groups one stream's messages into request bodies at fixed limits.

    Bulk appends (``bulk``: the server takes them, ``client.bulk``), any content type: an Arrow
    IPC stream of the messages; JSON streams without them: ``[m1,m2,…]`` (the server stores each
    element as its own message). Either way at most ``max_messages`` messages and, unless a single
    message is bigger, ``max_bytes`` bytes (counted as for the JSON array: each message plus one):
    each body takes messages while they fit (greedy, in order). Other streams without bulk
    appends store one message per request, so every message is its own body. A body is cut as soon as it is known to be
    complete (the next message would not fit, or it holds ``max_messages``); the rest waits for
    more messages or ``finish``. Cuts depend only on the messages' sizes in order, never on how
    they were batched on the way in.
    """

    def __init__(self, content_type: str, *, max_bytes: int, max_messages: int, bulk: bool = False) -> None:
        self.json = is_json(content_type)
        self.bulk = bulk
        self.max_bytes = max_bytes
        self.max_messages = max_messages if self.json or bulk else 1
        self._pending: pa.Array | None = None

    def add(self, messages: pa.Array) -> Iterator[bytes]:
        """Bodies completed by adding ``messages`` (checked ones, see ``checked_messages``)."""
        if self._pending is not None and len(self._pending):
            messages = pa.concat_arrays([self._pending, messages])
        self._pending = messages
        yield from self._cut(final=False)

    def finish(self) -> Iterator[bytes]:
        yield from self._cut(final=True)

    def _cut(self, *, final: bool) -> Iterator[bytes]:
        messages = self._pending
        if messages is None or not len(messages):
            return
        count = len(messages)
        # ends[j]: the bytes of messages 0..j-1 plus one separator each. A body of messages
        # [a, e) is 1 + ends[e] - ends[a] bytes long (brackets, commas between).
        sizes = pc.binary_length(messages).cast(pa.int64()).to_numpy(zero_copy_only=False)
        ends = np.concatenate([[0], np.cumsum(sizes + 1)])
        first = 0
        while first < count:
            fits = int(np.searchsorted(ends, ends[first] + self.max_bytes - 1, side="right")) - 1
            end = min(max(fits, first + 1), first + self.max_messages, count)
            if end == count and end - first < self.max_messages and not final:
                break  # the next message decides where this body ends
            yield self._body(messages.slice(first, end - first))
            first = end
        self._pending = messages.slice(first)

    def _body(self, messages: pa.Array) -> bytes:
        if self.bulk:
            return bulk.body(messages)
        if not self.json:
            return bytes(messages[0].as_py())
        items = pa.ListArray.from_arrays(pa.array([0, len(messages)], pa.int32()), messages)
        joined: bytes = pc.binary_join(items, b",")[0].as_py()
        return b"[" + joined + b"]"
