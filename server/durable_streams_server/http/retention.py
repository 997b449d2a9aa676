"""HTTP of retention policies (an extension): the headers that show a stream's, and ``PATCH`` that changes it.

The rules (what a policy is, what a change does, when points move) are ``protocol.retention``'s
and the engine's (``engine.retention``); these functions only translate between them and HTTP.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..engine.engine import Engine
from ..engine.stream import Stream
from ..protocol import retention
from ..protocol.errors import BadRequest
from ..protocol.offsets import encode_seq


def retention_headers(engine: Engine, stream: Stream) -> dict[str, str]:
    """The stream's retention limits, the earliest offset a read may ask for, and the bytes from there on."""
    headers = stream.retention.policy.headers() if stream.retention is not None else {}
    headers[retention.STREAM_EARLIEST_OFFSET] = encode_seq(engine.earliest_readable(stream))
    headers[retention.STREAM_RETAINED_BYTES] = str(stream.retained_bytes)
    return headers


def listing_fields(engine: Engine, stream: Stream) -> dict[str, object]:
    """What a bucket listing shows of a stream's retention."""
    fields: dict[str, object] = {
        "earliest_offset": encode_seq(engine.earliest_readable(stream)),
        "retained_bytes": stream.retained_bytes,
    }
    if stream.retention is not None and stream.retention.policy:
        fields["retention"] = stream.retention.policy.to_json()
    return fields


async def change_retention(engine: Engine, request: Request, name: str) -> Response:
    """``PATCH`` on a stream: set the retention limits the request names (``none`` removes one)."""
    changes = retention.parse_changes(request.headers)
    if not changes:
        raise BadRequest(
            f"PATCH changes a stream's retention: name a limit ({', '.join(retention.HEADERS.values())})",
            code="INVALID_RETENTION",
        )
    stream = await engine.retention.change(name, changes)
    return Response(status_code=204, headers=retention_headers(engine, stream))
