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
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from .client.models import is_json


class PayloadError(ValueError):
    """A row cannot become a message of its target stream."""


def row_messages(batch: pa.RecordBatch, *, value_column: str | None, json_columns: Sequence[str]) -> list[bytes | None]:
    """One message per row: the ``value`` column's bytes (str as UTF-8, None stays None), or
    with ``value_column=None`` the row's ``json_columns`` as one compact JSON object."""
    if value_column is not None:
        values = batch.column(value_column).to_pylist()
        return [value.encode("utf-8") if isinstance(value, str) else value for value in values]
    rows = batch.select(list(json_columns)).to_pylist()
    return [_dump(_clean(row)) for row in rows]


def _dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


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


def check_message(message: bytes | None, *, json_stream: bool, url: str) -> bytes:
    if message is not None:
        if not message and not json_stream:
            raise PayloadError(f"a row has an empty 'value' for {url}: the protocol does not store empty messages")
        return message
    if json_stream:
        return b"null"
    raise PayloadError(f"a row has a null 'value' for the byte stream {url}: only JSON streams can store null")


class RequestCutter:
    """Groups one stream's messages into request bodies at fixed limits.

    JSON streams: ``[m1,m2,…]`` (the server stores each element as its own message) with at most
    ``max_messages`` messages and, unless a single message is bigger, ``max_bytes`` bytes.
    Other streams store one message per request, so every message is its own body.
    """

    def __init__(self, content_type: str, *, max_bytes: int, max_messages: int) -> None:
        self.json = is_json(content_type)
        self.max_bytes = max_bytes
        self.max_messages = max_messages if self.json else 1
        self._parts: list[bytes] = []
        self._size = 2

    def add(self, message: bytes) -> Iterator[bytes]:
        """Bodies completed by adding ``message`` (zero or one)."""
        if self._parts and self._size + 1 + len(message) > self.max_bytes:
            yield self._cut()
        self._parts.append(message)
        self._size += len(message) + 1
        if len(self._parts) >= self.max_messages:
            yield self._cut()

    def finish(self) -> Iterator[bytes]:
        if self._parts:
            yield self._cut()

    def _cut(self) -> bytes:
        parts, self._parts, self._size = self._parts, [], 2
        if not self.json:
            return parts[0]
        return b"[" + b",".join(parts) + b"]"
