"""The values operations return: messages, stream metadata, and the outcomes of writes."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

JSON_CONTENT_TYPE = "application/json"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
ARROW_STREAM = "application/vnd.apache.arrow.stream"
"""Arrow IPC streams: our server's Arrow reads and bulk appends."""


def media_type(content_type: str | None) -> str:
    """The media type without parameters, lower-cased: how the protocol compares content types."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def is_json(content_type: str | None) -> bool:
    return media_type(content_type) == JSON_CONTENT_TYPE


@dataclass(frozen=True)
class Message:
    """One item read from a stream, and where it sits.

    ``data`` is exact bytes: one JSON value for JSON streams; for byte streams one message
    when the server exposes boundaries (multipart reads), otherwise one chunk as served.

    ``offset`` is the item's own offset and ``next_offset`` the offset just after it, each
    None where the server did not expose a boundary. That happens inside a JSON batch
    without multipart support: the first item of a response starts at the request's
    offset and the last ends at the response's ``Stream-Next-Offset``, but the items in
    between have no offsets of their own. Checkpoint the latest non-None ``next_offset``
    (or ``StreamReader.offset``, which tracks exactly that): resuming there never skips a
    message and repeats at most the rest of one response.
    """

    data: bytes
    content_type: str
    offset: str | None
    next_offset: str | None
    timestamp_ms: int | None = None

    def text(self) -> str:
        return self.data.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.data)


NO_LIMIT: Literal["none"] = "none"
Limit = int | Literal["none"] | None
"""A retention limit: a positive integer, ``NO_LIMIT``, or ``None`` (not named)."""

_HEADERS = {
    "max_age_seconds": "Stream-Retention-Max-Age",
    "max_bytes": "Stream-Retention-Max-Bytes",
    "max_messages": "Stream-Retention-Max-Messages",
}


@dataclass(frozen=True)
class Retention:
    """A stream's retention limits (``client.retention``); ``NO_LIMIT``: none, ``None``: not named."""

    max_age_seconds: Limit = None
    max_bytes: Limit = None
    max_messages: Limit = None

    def __post_init__(self) -> None:
        for name in _HEADERS:
            value = getattr(self, name)
            if value is not None and value != NO_LIMIT and (type(value) is not int or value < 1):
                raise ValueError(f"{name} must be a positive integer, {NO_LIMIT!r} or None, got {value!r}")

    def named(self) -> dict[str, int | str]:
        """The limits named, by field name."""
        return {name: value for name in _HEADERS if (value := getattr(self, name)) is not None}

    def headers(self) -> dict[str, str]:
        """The request headers naming these limits."""
        return {header_name: str(value) for name, header_name in _HEADERS.items() if (value := getattr(self, name))}

    @classmethod
    def from_headers(cls, header: Callable[[str], str | None]) -> Retention | None:
        """The limits a response (HEAD, PATCH) reports (``header``: its value of a header), or
        ``None`` when it reports none."""
        values = {name: header(header_name) for name, header_name in _HEADERS.items()}
        if not any(values.values()):
            return None
        return cls(**{name: int(value) for name, value in values.items() if value is not None and value.isdigit()})


@dataclass(frozen=True)
class StreamMetadata:
    """What HEAD says about a stream (spec 5.5; ``snapshot_offset`` from the extensions)."""

    content_type: str
    next_offset: str
    closed: bool
    ttl_seconds: int | None
    expires_at: str | None
    snapshot_offset: str | None
    incarnation: str | None = None
    """Our server's ``Stream-Incarnation`` (extension): changes when the path is deleted and created
    again. None where the server does not send it."""
    bulk_append: bool = False
    """Whether the server takes bulk appends (``client.bulk``, extension) on this stream."""
    earliest_offset: str | None = None
    """Our server's ``Stream-Earliest-Offset`` (extension): the first offset a read may ask for
    (reads below answer ``410 Gone``). None where the server does not send it."""
    retained_bytes: int | None = None
    """Our server's ``Stream-Retained-Bytes``: the bytes from the earliest offset to the tail."""
    retention: Retention | None = None
    """The stream's retention limits (``client.retention``), if it has any."""
    flushed_offset: str | None = None
    """Our server's ``Stream-Flushed-Offset`` (read plans extension): no message from it on is in the
    table's files yet, so a read plan of a range starting there lists none. None where not sent."""


@dataclass(frozen=True)
class CreateResult:
    """``created`` is False when the stream already existed with the same configuration."""

    created: bool
    content_type: str
    next_offset: str | None
    closed: bool


@dataclass(frozen=True)
class AppendResult:
    """The tail after an append or close; ``duplicate`` when a producer retry was deduplicated.

    ``next_offset`` can be None only for a producer duplicate (servers need not repeat it).
    """

    next_offset: str | None
    closed: bool
    duplicate: bool = False
    producer_epoch: int | None = None
    producer_seq: int | None = None


@dataclass(frozen=True)
class Snapshot:
    """A published snapshot: the folded state of the stream before ``offset``."""

    offset: str
    content_type: str
    data: bytes
    next_offset: str | None = None
    up_to_date: bool = False
