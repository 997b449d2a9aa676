"""JSON mode (spec section 7.1): validation, one-level array flattening, response framing.

Messages are stored as compact JSON text, one stored message per logical message, so a
read is the stored texts joined with commas inside brackets: no re-parsing on the read
path.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from json import encoder as _json_encoder
from typing import Any

from .errors import BadRequest

_encode: Callable[[Any], str] = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _unserializable(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _message_encoder() -> Callable[[Any], str]:
    """``_encode`` without its per-call cost.

    ``JSONEncoder.encode`` builds its C encoder anew on every call, which costs more than
    encoding a small message. One C encoder made once with ``_encode``'s settings gives the
    same text (decoded JSON holds no cycles, so it needs no cycle markers).
    """
    make = getattr(_json_encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - a Python without the _json accelerator
        return _encode
    encode_c = make(None, _unserializable, _json_encoder.encode_basestring, None, ":", ",", False, False, False)
    return lambda value: "".join(encode_c(value, 0))


_encode_message = _message_encoder()


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
            return [_encode_message(item).encode() for item in value]
        return [_encode_message(value).encode()]
    except (ValueError, RecursionError) as exc:
        # Covers bytes that are not UTF-8 or not JSON, numbers that overflow to
        # infinity, lone surrogates, and nesting deeper than the parser allows.
        raise BadRequest(f"invalid JSON body: {exc}", code="INVALID_JSON") from exc


def frame(messages: Iterable[bytes]) -> bytes:
    """A JSON array of already-encoded messages."""
    return b"[" + b",".join(messages) + b"]"
