"""Parsing and validation of the protocol's request headers.

Every function takes raw header text (``None`` when absent) and returns a typed value or
raises ``BadRequest``; the spec's syntax rules live here and nowhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from .errors import BadRequest

DEFAULT_CONTENT_TYPE = "application/octet-stream"
JSON_CONTENT_TYPE = "application/json"

# Header names, spelled as the spec spells them (HTTP matching is case-insensitive).
STREAM_NEXT_OFFSET = "Stream-Next-Offset"
STREAM_UP_TO_DATE = "Stream-Up-To-Date"
STREAM_CLOSED = "Stream-Closed"
STREAM_CURSOR = "Stream-Cursor"
STREAM_TTL = "Stream-TTL"
STREAM_EXPIRES_AT = "Stream-Expires-At"
STREAM_SEQ = "Stream-Seq"
STREAM_FORKED_FROM = "Stream-Forked-From"
STREAM_FORK_OFFSET = "Stream-Fork-Offset"
STREAM_FORK_SUB_OFFSET = "Stream-Fork-Sub-Offset"
PRODUCER_ID = "Producer-Id"
PRODUCER_EPOCH = "Producer-Epoch"
PRODUCER_SEQ = "Producer-Seq"
PRODUCER_EXPECTED_SEQ = "Producer-Expected-Seq"
PRODUCER_RECEIVED_SEQ = "Producer-Received-Seq"
SSE_DATA_ENCODING = "Stream-SSE-Data-Encoding"
STREAM_SNAPSHOT_OFFSET = "Stream-Snapshot-Offset"
STREAM_OFFSET = "Stream-Offset"
STREAM_TIMESTAMP = "Stream-Timestamp"
STREAM_INCARNATION = "Stream-Incarnation"
"""Extension: an opaque token naming one incarnation of a stream path (HEAD and reads). A path that is
deleted and created again answers another token; the token survives server restarts."""
STREAM_FLUSHED_OFFSET = "Stream-Flushed-Offset"
"""Extension (read plans), on HEAD: none of the stream's messages from this offset on is in the table's
files yet, so a read plan of a range that starts there or later lists none (a reader need not ask)."""

MAX_SAFE_INTEGER = 2**53 - 1

# At most 16 digits (2^53-1 has 16): int() of thousands of digits raises, not just slowly.
_TTL_RE = re.compile(r"^(0|[1-9][0-9]{0,15})$")
_INT_RE = re.compile(r"^[0-9]{1,16}$")
# RFC 3339 date-time: full-date "T" full-time, with a mandatory offset (Z or ±hh:mm).
_RFC3339_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_MEDIA_TYPE_RE = re.compile(rf"^{_TOKEN}/{_TOKEN}$")


def normalize_content_type(raw: str | None) -> str:
    """The media type without parameters, lower-cased: what stream content types compare by."""
    if raw is None:
        return ""
    return raw.split(";", 1)[0].strip().lower()


def is_json(content_type: str) -> bool:
    return normalize_content_type(content_type) == JSON_CONTENT_TYPE


def is_text_like(content_type: str) -> bool:
    """SSE carries these as UTF-8 text; everything else is base64-encoded."""
    media_type = normalize_content_type(content_type)
    return media_type.startswith("text/") or media_type == JSON_CONTENT_TYPE


def parse_content_type(raw: str | None) -> str | None:
    """Validate a request Content-Type; ``None`` when absent or blank."""
    if raw is None or not raw.strip():
        return None
    if not _MEDIA_TYPE_RE.fullmatch(normalize_content_type(raw)):
        raise BadRequest(f"invalid Content-Type {raw!r}", code="INVALID_CONTENT_TYPE")
    return raw.strip()


def parse_ttl(raw: str | None) -> int | None:
    """``Stream-TTL``: a non-negative decimal integer with no sign, leading zero or exponent."""
    if raw is None:
        return None
    if not _TTL_RE.fullmatch(raw) or int(raw) > MAX_SAFE_INTEGER:
        raise BadRequest(f"invalid Stream-TTL {raw!r}: expected a non-negative integer of seconds", code="INVALID_TTL")
    return int(raw)


def parse_expires_at(raw: str | None) -> datetime | None:
    """``Stream-Expires-At``: an RFC 3339 timestamp with an explicit offset."""
    if raw is None:
        return None
    value = raw.strip()
    match = _RFC3339_RE.fullmatch(value)
    if not match:
        raise BadRequest(
            f"invalid Stream-Expires-At {raw!r}: expected an RFC 3339 timestamp", code="INVALID_EXPIRES_AT"
        )
    try:
        iso = value.replace("z", "Z").replace("t", "T")
        if iso.endswith("Z"):
            iso = iso[:-1] + "+00:00"
        return datetime.fromisoformat(iso)
    except ValueError as exc:
        raise BadRequest(f"invalid Stream-Expires-At {raw!r}: {exc}", code="INVALID_EXPIRES_AT") from exc


def is_closed_flag(raw: str | None) -> bool:
    """``Stream-Closed`` counts only when it is exactly ``true`` (any case); other values are ignored."""
    return raw is not None and raw.strip().lower() == "true"


def _parse_safe_int(name: str, raw: str) -> int:
    value = raw.strip()
    if not _INT_RE.fullmatch(value) or int(value) > MAX_SAFE_INTEGER:
        raise BadRequest(f"invalid {name} {raw!r}: expected an integer from 0 to 2^53-1", code="INVALID_PRODUCER")
    return int(value)


@dataclass(frozen=True, slots=True)
class ProducerHeaders:
    producer_id: str
    epoch: int
    seq: int


def parse_producer(producer_id: str | None, epoch: str | None, seq: str | None) -> ProducerHeaders | None:
    """All three producer headers together, or none of them."""
    present = [value is not None for value in (producer_id, epoch, seq)]
    if not any(present):
        return None
    if not all(present):
        raise BadRequest("Producer-Id, Producer-Epoch and Producer-Seq must be sent together", code="INVALID_PRODUCER")
    assert producer_id is not None and epoch is not None and seq is not None
    if not producer_id.strip():
        raise BadRequest("Producer-Id must not be empty", code="INVALID_PRODUCER")
    return ProducerHeaders(producer_id, _parse_safe_int(PRODUCER_EPOCH, epoch), _parse_safe_int(PRODUCER_SEQ, seq))


def parse_non_negative_int(name: str, raw: str | None) -> int | None:
    if raw is None:
        return None
    value = raw.strip()
    if not _INT_RE.fullmatch(value) or int(value) > MAX_SAFE_INTEGER:
        raise BadRequest(f"invalid {name} {raw!r}: expected a non-negative integer", code="INVALID_HEADER")
    return int(value)
