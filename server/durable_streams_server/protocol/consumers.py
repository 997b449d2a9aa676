"""Named consumers' progress (a reserved-namespace extension): names and request bodies.

``PUT {root}__ds/consumers/{name}`` with ``{"offsets": {"<path>": "<offset>", ...}}`` records
where a consumer has read up to (exclusive: the next offset it will read) in each stream
it names; streams it does not name keep their recorded position. Pure validation here;
the engine (``engine/consumers.py``) checks offsets against the streams.
"""

from __future__ import annotations

from .errors import BadRequest
from .offsets import Offset, parse_offset
from .subscriptions import validate_control_name, validate_path

MAX_STREAMS_PER_REQUEST = 10_000


def validate_consumer_name(name: str) -> str:
    return validate_control_name(name, "consumer name", "INVALID_CONSUMER")


def parse_progress(body: object, bucketed: bool) -> dict[str, Offset]:
    """``{"offsets": {path: offset}}`` -> the positions by root-relative path (message
    boundaries: a consumer's position is where its next read starts)."""
    offsets = body.get("offsets") if isinstance(body, dict) else None
    if not isinstance(offsets, dict) or not offsets:
        raise BadRequest(
            'the body must be {"offsets": {"<stream path>": "<offset>", ...}} with at least one stream',
            code="INVALID_CONSUMER_PROGRESS",
        )
    if len(offsets) > MAX_STREAMS_PER_REQUEST:
        raise BadRequest(
            f"at most {MAX_STREAMS_PER_REQUEST} streams per request, got {len(offsets)}",
            code="INVALID_CONSUMER_PROGRESS",
        )
    positions: dict[str, Offset] = {}
    for path, token in offsets.items():
        path = validate_path(path, bucketed, "offsets")
        if not isinstance(token, str):
            raise BadRequest(f"offsets: the offset of {path!r} must be a string", code="INVALID_OFFSET")
        offset = parse_offset(token)
        if offset.within:
            raise BadRequest(
                f"offsets: {token!r} of {path!r} is inside a message; a consumer's position is a message boundary",
                code="INVALID_OFFSET",
            )
        positions[path] = offset
    return positions
