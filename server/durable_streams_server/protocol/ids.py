"""Identifier rules of the bucket extension (extensions spec section 1.1)."""

from __future__ import annotations

import re

from .errors import BadRequest

_BUCKET_ID_RE = re.compile(r"[a-z0-9_-]{4,64}")
MAX_STREAM_KEY_BYTES = 122
RESERVED_STREAM_IDS = frozenset({"streams"})


def validate_bucket_id(bucket_id: str) -> str:
    if not _BUCKET_ID_RE.fullmatch(bucket_id):
        raise BadRequest(
            f"invalid bucket id {bucket_id!r}: 4 to 64 characters of a-z, 0-9, '_' and '-'", code="INVALID_BUCKET_ID"
        )
    return bucket_id


def validate_stream_id(bucket_id: str, stream_id: str) -> str:
    """A bucket-local stream id; returns the stream's key ``{bucket_id}/{stream_id}``."""
    if not stream_id or stream_id == "." or ".." in stream_id:
        raise BadRequest(f"invalid stream id {stream_id!r}: empty, '.' or containing '..'", code="INVALID_STREAM_ID")
    if "/" in stream_id or "\0" in stream_id:
        raise BadRequest("a stream id must not contain '/' or NUL", code="INVALID_STREAM_ID")
    if stream_id in RESERVED_STREAM_IDS:
        raise BadRequest(f"{stream_id!r} is reserved for the bucket listing", code="INVALID_STREAM_ID")
    key = f"{bucket_id}/{stream_id}"
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise BadRequest("a stream id must be valid UTF-8", code="INVALID_STREAM_ID") from exc
    if size > MAX_STREAM_KEY_BYTES:
        raise BadRequest(
            f"'{{bucket_id}}/{{stream_id}}' is {size} bytes; at most {MAX_STREAM_KEY_BYTES} are allowed",
            code="INVALID_STREAM_ID",
        )
    return key
