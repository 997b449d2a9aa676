"""JSON mode (spec section 7.1): validation, one-level array flattening, response framing.

Messages are stored as compact JSON text, one stored message per logical message, so a
read is the stored texts joined with commas inside brackets: no re-parsing on the read
path.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from .errors import BadRequest

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


_decode = json.JSONDecoder(parse_constant=_reject_constant).decode


def split_messages(body: bytes, *, allow_empty_array: bool) -> list[bytes]:
    """Validate a JSON body and return one compact encoded message per logical message.

    A top-level array is flattened exactly one level. An empty array is an error on
    append (a no-op is most likely a client bug) but valid on create.
    """
    try:
        value = _decode(body.decode("utf-8"))
        if isinstance(value, list):
            if not value and not allow_empty_array:
                raise BadRequest("empty JSON arrays cannot be appended", code="EMPTY_JSON_ARRAY")
            return [_encode(item).encode() for item in value]
        return [_encode(value).encode()]
    except (ValueError, RecursionError) as exc:
        # Covers bytes that are not UTF-8 or not JSON, numbers that overflow to
        # infinity, lone surrogates, and nesting deeper than the parser allows.
        raise BadRequest(f"invalid JSON body: {exc}", code="INVALID_JSON") from exc


def frame(messages: Iterable[bytes]) -> bytes:
    """A JSON array of already-encoded messages."""
    return b"[" + b",".join(messages) + b"]"
