"""HTTP handlers of the protocol extensions: buckets and their listing, snapshots, bootstrap.

The rules (status codes, retention, id constraints) are the engine's and the protocol
layer's; these functions only translate between them and HTTP.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..engine import reads
from ..engine.buckets import Bucket
from ..engine.engine import Engine
from ..engine.stream import Stream
from ..protocol import headers as h
from ..protocol import retention
from ..protocol.errors import BadRequest, Conflict, NotFound
from ..protocol.offsets import Offset, encode_seq, parse_offset
from . import multipart
from .responses import location
from .retention import listing_fields
from .streams import StreamHandlers

MAX_LIST_LIMIT = 1000
_LIMIT_RE = re.compile(r"[0-9]{1,4}")  # ASCII digits only ('²'.isdigit())


def _bool_header(value: bool) -> str:
    return "true" if value else "false"


class ExtensionHandlers:
    def __init__(self, streams: StreamHandlers) -> None:
        self.streams = streams
        self.engine: Engine = streams.engine

    # -- buckets ------------------------------------------------------------------------

    async def create_bucket(self, bucket_id: str, headers: Mapping[str, str]) -> Response:
        bucket = await self.engine.create_bucket(bucket_id, retention.parse_changes(headers))
        body = {"bucket_id": bucket.bucket_id, "created_at_ms": bucket.created_ms, **_bucket_retention(bucket)}
        return JSONResponse(body, status_code=201)

    def get_bucket(self, bucket_id: str) -> Response:
        bucket = self.engine.buckets.get(bucket_id)
        body = {
            "bucket_id": bucket.bucket_id,
            "streams": len(bucket.stream_ids),
            "created_at_ms": bucket.created_ms,
            **_bucket_retention(bucket),
        }
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    async def delete_bucket(self, bucket_id: str) -> Response:
        await self.engine.delete_bucket(bucket_id)
        return Response(status_code=204)

    def list_streams(self, request: Request, bucket_id: str) -> Response:
        bucket = self.engine.buckets.get(bucket_id)
        params = request.query_params
        prefix = params.get("prefix", "")
        after = params.get("after")
        limit_raw = params.get("limit", str(MAX_LIST_LIMIT))
        if not _LIMIT_RE.fullmatch(limit_raw) or not 1 <= int(limit_raw) <= MAX_LIST_LIMIT:
            raise BadRequest(f"limit must be an integer from 1 to {MAX_LIST_LIMIT}", code="INVALID_LIMIT")
        limit = int(limit_raw)
        while True:
            ids, has_more = bucket.page(prefix, after, limit)
            found = [self.engine.find(f"{bucket_id}/{stream_id}") for stream_id in ids]
            if all(stream is not None for stream in found):
                break  # else an expired stream just left the index: page again
        entries = [
            {**_listing_entry(stream_id, stream), **listing_fields(self.engine, stream)}
            for stream_id, stream in zip(ids, found, strict=True)
            if stream
        ]
        body = {
            "bucket_id": bucket_id,
            "prefix": prefix,
            "stream_count": len(entries),
            "streams": entries,
            "next_cursor": ids[-1] if has_more else None,
            "has_more": has_more,
        }
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    # -- snapshots ----------------------------------------------------------------------

    async def publish_snapshot(self, request: Request, name: str, offset_token: str) -> Response:
        offset = _snapshot_offset(offset_token)
        self.engine.get_live(name)  # 404 before reading a body that cannot be stored
        content_type = h.parse_content_type(request.headers.get("content-type")) or h.DEFAULT_CONTENT_TYPE
        blob = await self.streams.bodies.of(request)
        await self.engine.snapshots.publish(name, offset.seq, content_type, blob)
        return Response(status_code=204)

    def latest_snapshot(self, request: Request, name: str) -> Response:
        stream = self.engine.get_live(name)
        if stream.snapshot_seq is None:
            raise NotFound("the stream has no snapshot", code="SNAPSHOT_NOT_FOUND")
        target = location(request.scope, f"/{encode_seq(stream.snapshot_seq)}")
        return Response(status_code=307, headers={"Location": target, "Cache-Control": "no-store"})

    async def read_snapshot(self, name: str, offset_token: str) -> Response:
        stream = self._snapshot_at(name, offset_token)
        blob = await self.engine.snapshots.blob(stream)
        assert stream.snapshot_seq is not None and stream.snapshot_content_type is not None
        headers = {
            "Content-Type": stream.snapshot_content_type,
            h.STREAM_SNAPSHOT_OFFSET: encode_seq(stream.snapshot_seq),
            h.STREAM_NEXT_OFFSET: encode_seq(stream.snapshot_seq),
            h.STREAM_UP_TO_DATE: _bool_header(stream.snapshot_seq == stream.visible_tail),
            "Cache-Control": "no-store",
        }
        return Response(blob, headers=headers)

    def delete_snapshot(self, name: str, offset_token: str) -> Response:
        self._snapshot_at(name, offset_token)
        raise Conflict(
            "the latest snapshot cannot be deleted: /bootstrap would become incomplete", code="SNAPSHOT_IS_LATEST"
        )

    def _snapshot_at(self, name: str, offset_token: str) -> Stream:
        """The stream whose latest snapshot is at ``offset_token`` (older ones are gone)."""
        offset = _snapshot_offset(offset_token)
        stream = self.engine.get_live(name)
        if stream.snapshot_seq != offset.seq:
            raise NotFound(f"no snapshot at {offset_token}", code="SNAPSHOT_NOT_FOUND")
        return stream

    # -- bootstrap ----------------------------------------------------------------------

    async def bootstrap(self, request: Request, name: str) -> Response:
        if "live" in request.query_params:
            raise BadRequest("/bootstrap is one-shot: read live from Stream-Next-Offset instead", code="INVALID_LIVE")
        stream = self.engine.get_live(name)
        self.engine.touch(stream)
        tail = stream.visible_tail
        snapshot = None
        if stream.snapshot_seq is not None:
            assert stream.snapshot_content_type is not None
            snapshot = (stream.snapshot_content_type, await self.engine.snapshots.blob(stream))
        boundary = multipart.new_boundary()
        headers = {
            "Content-Type": multipart.content_type(boundary),
            h.STREAM_SNAPSHOT_OFFSET: encode_seq(stream.snapshot_seq) if stream.snapshot_seq is not None else "-1",
            h.STREAM_NEXT_OFFSET: encode_seq(tail),
            h.STREAM_UP_TO_DATE: "true",
            "Cache-Control": "no-store",
        }
        if stream.visible_closed:
            headers[h.STREAM_CLOSED] = "true"
        parts = self._bootstrap_parts(stream, boundary, snapshot, tail)
        return StreamingResponse(parts, headers=headers)

    async def _bootstrap_parts(
        self, stream: Stream, boundary: str, snapshot: tuple[str, bytes] | None, tail: int
    ) -> AsyncIterator[bytes]:
        content_type, blob = snapshot or (h.DEFAULT_CONTENT_TYPE, b"")
        yield multipart.part(boundary, {"Content-Type": content_type}, blob)
        offset = Offset(self.engine.earliest_readable(stream))
        limits = self.streams.limits
        while offset.seq < tail:
            result = await reads.read(self.engine, stream, offset, limits.max_read_bytes, whole=True)
            kept = min(len(result.chunks), tail - offset.seq)
            yield multipart.message_parts(
                boundary, stream.content_type, offset, result.chunks[:kept], result.stamps[:kept]
            )
            offset = Offset(offset.seq + kept)
        yield multipart.closing(boundary)


def _snapshot_offset(token: str) -> Offset:
    offset = parse_offset(token)
    if offset.within != 0:
        raise BadRequest(f"snapshot offset {token} is not a message boundary", code="INVALID_OFFSET")
    return offset


def _bucket_retention(bucket: Bucket) -> dict[str, object]:
    """The retention limits a bucket gives its new streams (``null``: none, whatever the server's)."""
    return {"retention": bucket.retention} if bucket.retention else {}


def _listing_entry(stream_id: str, stream: Stream) -> dict[str, object]:
    status = "Deleted" if stream.soft_deleted else "Closed" if stream.visible_closed else "Open"
    return {
        "stream_id": stream_id,
        "status": status,
        "content_type": stream.content_type,
        "tail_offset": stream.visible_tail,
        "next_offset": encode_seq(stream.visible_tail),
        "created_at_ms": stream.created_ms,
        "incarnation": stream.incarnation,
        "last_write_at_ms": stream.last_write_ms,
    }
