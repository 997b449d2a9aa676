"""Identifier rules: the bucket extension's (extensions spec section 1.1), and the
base surface's stream paths (which the spec leaves to "validate and sanitize")."""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

from .errors import BadRequest

BASE_SURFACE_PREFIX = "v1/stream/"
"""Stream keys (and URL paths, after the leading '/') of the base surface start with this."""
_BUCKET_ID_RE = re.compile(r"[a-z0-9_-]{4,64}")
MAX_STREAM_KEY_BYTES = 122
MAX_BASE_PATH_BYTES = 1024
RESERVED_STREAM_IDS = frozenset({"streams"})
RESERVED_BUCKET_IDS = frozenset({"healthz", "readyz", "metrics"})
"""Top-level paths the server answers itself, so no bucket may take them."""


def validate_bucket_id(bucket_id: str) -> str:
    if not _BUCKET_ID_RE.fullmatch(bucket_id):
        raise BadRequest(
            f"invalid bucket id {bucket_id!r}: 4 to 64 characters of a-z, 0-9, '_' and '-'", code="INVALID_BUCKET_ID"
        )
    if bucket_id in RESERVED_BUCKET_IDS:
        raise BadRequest(f"{bucket_id!r} is reserved for the server's own /{bucket_id}", code="INVALID_BUCKET_ID")
    return bucket_id


def validate_raw_path(raw_path: bytes) -> None:
    """The request path must percent-decode to UTF-8: the ASGI server decodes it with
    replacement characters, which would give distinct URLs one stream name."""
    if b"%" in raw_path:
        try:
            unquote_to_bytes(raw_path).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRequest("the path is not UTF-8 once percent-decoded", code="INVALID_PATH") from exc


def validate_base_path(name: str) -> str:
    """A base-surface stream key ``v1/stream/<path>``: non-empty '/'-separated segments,
    none of them '.' or '..', no NUL, at most ``MAX_BASE_PATH_BYTES`` in UTF-8."""
    path = name.removeprefix(BASE_SURFACE_PREFIX)
    empty_segment = not path or path[0] == "/" or path[-1] == "/" or "//" in path
    dot_segment = "." in path and any(segment in (".", "..") for segment in path.split("/"))
    if empty_segment or dot_segment or "\0" in name:
        raise BadRequest(
            f"invalid stream path {name!r}: empty, '.' or '..' segments and NUL are not allowed",
            code="INVALID_STREAM_PATH",
        )
    if len(name.encode("utf-8", "surrogatepass")) > MAX_BASE_PATH_BYTES:
        raise BadRequest(f"the stream path is over {MAX_BASE_PATH_BYTES} bytes", code="INVALID_STREAM_PATH")
    return name


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
