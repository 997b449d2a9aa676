"""Extension: time lookups (``Accept: application/vnd.durable-streams.offset-for-time+json``).

``GET <stream URL>?timestamp=<ms since the epoch>`` with that ``Accept`` answers, instead of
messages, where the stream's messages appended at or after that time begin
(``engine.time_lookup``), as a JSON object: ``stream``, ``incarnation``, ``timestamp`` (as
asked), ``offset`` (the first readable message appended at or after it, or ``null`` when
none was) and ``next_offset`` (the visible tail when answered). It is answered from the
Delta log's and the Parquet footers' statistics of ``ts`` and the in-memory tail, reading at
most a row group's four columns, never the history in between.

Reads need read scope on the stream, as any GET. A missing or malformed ``timestamp`` is
400 ``INVALID_TIMESTAMP``; a stream's later incarnation answers for its own messages only.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..engine import time_lookup
from ..engine.engine import Engine
from ..protocol.errors import BadRequest
from ..protocol.offsets import encode_seq

OFFSET_FOR_TIME = "application/vnd.durable-streams.offset-for-time+json"
_MAX_MS = 2**53 - 1


def wants_time_lookup(accept: str | None) -> bool:
    return accept is not None and OFFSET_FOR_TIME in accept.lower()


class TimeLookupHandlers:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def lookup(self, request: Request, name: str) -> Response:
        raw = request.query_params.get("timestamp", "")
        if not (raw.isascii() and raw.isdigit()) or int(raw) > _MAX_MS:
            raise BadRequest(
                f"query parameter 'timestamp' must be milliseconds since the epoch (0 to 2^53-1), got {raw!r}",
                code="INVALID_TIMESTAMP",
            )
        stream = self.engine.get_live(name)
        found = await time_lookup.first_at(self.engine, stream, int(raw))
        body = {
            "stream": name,
            "incarnation": stream.incarnation,
            "timestamp": int(raw),
            "offset": encode_seq(found) if found is not None else None,
            "next_offset": encode_seq(stream.visible_tail),
        }
        return Response(orjson.dumps(body), headers={"Cache-Control": "no-store"}, media_type=OFFSET_FOR_TIME)
