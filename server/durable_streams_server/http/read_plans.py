"""Extension: read plans (``Accept: application/vnd.durable-streams.read-plan+json``) and the
signed file endpoint that serves the table's data files to readers (unless presigned S3 URLs do).

``GET <stream URL>?offset=<o>[&end=<e>]`` with that ``Accept`` answers, instead of the
messages, where they are stored (``engine.read_plans``): a JSON object

``stream``, ``incarnation``, ``content_type``; ``start``/``end`` (offsets: the range
planned, ``end`` cut at the visible tail); ``delta_end`` (offset: ``[start, delta_end)`` is
in the files below, ``[delta_end, end)`` must be read over HTTP); ``table_version``;
``expires_at_ms`` (the file URLs' expiry); ``segments``: per incarnation the range crosses,
``stream_uid``, ``first_seq``, ``end_seq`` and ``files``: ``path``, ``size``, ``url``
(``local_path`` too for a local table: readers that share the server's filesystem, and may
read it, open the file there instead) and ``row_groups`` (``index``, ``first_seq``, ``last_seq``, ``rows``, ``exact``).

A reader takes, from each listed row group, the rows with ``stream_uid`` equal to the
segment's, ``kind = 'message'`` and ``first_seq <= seq < end_seq``: their ``seq``, ``ts``
and ``data`` are exactly what an Arrow read of the range returns. Reads need read scope on
the stream, as any GET; the same offset checks apply (410 below retention).

File URLs are relative to the plan's URL: ``/v1/files/<path>?expires=…&signature=…``
(``protocol.signed_paths``), or absolute presigned S3 URLs. The file endpoint
needs no bearer token (the signature is the grant), answers ``Range`` requests, and 403 /
404 (JSON) for a bad or expired signature / a file no longer there.
"""

from __future__ import annotations

import secrets
import time
from typing import Any
from urllib.parse import quote

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..engine import read_plans
from ..engine.engine import Engine
from ..protocol.errors import MethodNotAllowed
from ..protocol.offsets import BEGINNING_SENTINEL, Offset, encode_seq, parse_offset
from ..protocol.signed_paths import signature, verify
from ..storage.read_plans import FileAccess, PlannedFile
from .arrow_ipc import stop_seq
from .stored_files import stored_file_response

READ_PLAN = "application/vnd.durable-streams.read-plan+json"
FILES_PREFIX = "/v1/files/"


def wants_plan(accept: str | None) -> bool:
    return accept is not None and READ_PLAN in accept.lower()


class ReadPlanHandlers:
    def __init__(self, engine: Engine, access: FileAccess, ttl_s: int) -> None:
        self.engine = engine
        self.access = access
        self.ttl_s = ttl_s
        self._key = secrets.token_bytes(32)

    async def plan(self, request: Request, name: str) -> Response:
        params = request.query_params
        raw = params.get("offset", BEGINNING_SENTINEL)
        start = Offset(0) if raw == BEGINNING_SENTINEL else parse_offset(raw)
        stream = self.engine.get_live(name)
        found = await read_plans.plan(self.engine, stream, start, stop_seq(params.get("end")))
        expires = int(time.time()) + self.ttl_s
        body: dict[str, Any] = {
            "stream": name,
            "incarnation": stream.incarnation,
            "content_type": stream.content_type,
            "start": encode_seq(found.start),
            "end": encode_seq(found.end),
            "delta_end": encode_seq(found.boundary),
            "table_version": found.version,
            "expires_at_ms": expires * 1000,
            "segments": [
                {
                    "stream_uid": segment.uid,
                    "first_seq": segment.first,
                    "end_seq": segment.end,
                    "files": [self._file(planned, expires) for planned in segment.files],
                }
                for segment in found.segments
            ],
        }
        # (orjson: a plan of a long backlog lists hundreds of row groups)
        return Response(orjson.dumps(body), headers={"Cache-Control": "no-store"}, media_type=READ_PLAN)

    def _file(self, planned: PlannedFile, expires: int) -> dict[str, Any]:
        url = planned.url
        if url is None:
            signed = signature(self._key, planned.path, expires)
            url = f"{FILES_PREFIX}{quote(planned.path)}?expires={expires}&signature={signed}"
        groups = [
            {"index": g.index, "first_seq": g.first_seq, "last_seq": g.last_seq, "rows": g.rows, "exact": g.exact}
            for g in planned.row_groups
        ]
        found = {"path": planned.path, "size": planned.size, "url": url, "row_groups": groups}
        return found | ({"local_path": planned.local} if planned.local is not None else {})

    async def file(self, request: Request, path: str) -> Response:
        """``GET /v1/files/<path>``: a data file of the table (local, or read from its object
        store), for a signed URL."""
        if request.method not in ("GET", "HEAD"):
            raise MethodNotAllowed("data files are read-only")
        params = request.query_params
        verify(self._key, path, params.get("expires"), params.get("signature"), time.time())
        if self.access.stored is not None:
            return await stored_file_response(request, self.access.stored, path)
        # (opened before answering: a file vacuumed after the check is a 404, never a 500)
        return await stored_file_response(request, self.access.local_file(path), path)
