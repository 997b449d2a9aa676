"""The streams view of the status page: a filtered listing, and one stream's recent messages.

The listing walks the stream names (``Engine.stream_names``: no stream is built for it),
keeps those the token may read and the filters match (a bucket; text contained in the name),
and builds only the page of rows it answers (at most ``MAX_ROWS``), as any request for
those streams would. Per stream it shows what the engine keeps anyway: the visible tail,
messages still readable (tail minus the earliest readable offset), last write, closure,
TTL/expiry, the bytes appended to it (``Stream.bytes_total``, kept for consumers' lag: 0 for
what was appended before the server counted them) and the readers waiting at its tail
(long-poll and SSE waiters).

A stream's recent messages are read like any read (``engine.reads.read``, whole messages),
at most ``RECENT_MESSAGES`` of them and ``RECENT_BYTES`` in all; text and JSON as text,
anything else as hex of its first ``HEX_BYTES``. The page then follows the stream live over
its own SSE URL from ``next_offset``.
"""

from __future__ import annotations

from typing import Any

from ...engine import reads
from ...engine.buckets import bucket_of
from ...engine.engine import Engine
from ...engine.stream import Stream
from ...protocol import headers as h
from ...protocol.errors import BadRequest, NotFound
from ...protocol.offsets import Offset, encode_seq
from ...protocol.tokens import TokenGrant
from ..policy import Need

MAX_ROWS = 1000
DEFAULT_ROWS = 200
RECENT_MESSAGES = 20
RECENT_BYTES = 256 * 1024
HEX_BYTES = 256


def may_read(grant: TokenGrant, name: str) -> bool:
    return Need("read", "stream", name).covered_by(grant)


def _rows_param(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_ROWS
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_ROWS:
        raise BadRequest(f"limit must be an integer from 1 to {MAX_ROWS}", code="INVALID_LIMIT")
    return int(raw)


def list_streams(engine: Engine, grant: TokenGrant, params: dict[str, str]) -> dict[str, Any]:
    """``GET /v1/status/streams?bucket=&q=&limit=``: rows sorted by name (module docstring)."""
    limit = _rows_param(params.get("limit"))
    bucket, text = params.get("bucket", ""), params.get("q", "")
    names = sorted(
        name
        for name in engine.stream_names()
        if may_read(grant, name) and text in name and (not bucket or _bucket_label(name) == bucket)
    )
    rows = []
    now = engine.clock()
    for name in names[:limit]:
        stream = engine.find(name)  # (expires a stream whose TTL ran out, as any request would)
        if stream is not None and stream.name == name:
            rows.append(_row(engine, stream, now))
    return {"matched": len(names), "streams": rows, "truncated": len(names) > limit}


def _bucket_label(name: str) -> str:
    """The bucket of a stream key; ``""`` for the base surface."""
    located = bucket_of(name)
    return located[0] if located is not None else ""


def _row(engine: Engine, stream: Stream, now_ms: int) -> dict[str, Any]:
    status = "deleted" if stream.soft_deleted else "closed" if stream.visible_closed else "open"
    return {
        "name": stream.name,
        "url": "/" + stream.name,
        "bucket": _bucket_label(stream.name) or None,
        "content_type": stream.content_type,
        "status": status,
        "tail_offset": encode_seq(stream.visible_tail),
        "messages": stream.visible_tail - min(engine.earliest_readable(stream), stream.visible_tail),
        "bytes": stream.bytes_total,
        "created_at_ms": stream.created_ms,
        "last_append_at_ms": stream.last_write_ms or None,
        "ttl_s": stream.ttl_s,
        "ttl_remaining_s": stream.remaining_ttl_s(now_ms),
        "expires_at": stream.expires_at,
        "live_readers": len(stream.waiters),
    }


async def recent_messages(engine: Engine, grant: TokenGrant, name: str) -> dict[str, Any]:
    """``GET /v1/status/stream?name=``: the row of one stream and its newest messages."""
    if not name:
        raise BadRequest("name the stream: ?name=<stream key, as in the listing>", code="INVALID_STREAM_NAME")
    stream = engine.find(name) if may_read(grant, name) else None
    if stream is None or stream.soft_deleted:
        # (a stream the token may not read is answered as one that does not exist)
        raise NotFound(f"stream {name!r} not found", code="STREAM_NOT_FOUND")
    tail = stream.visible_tail
    start = max(engine.earliest_readable(stream), tail - RECENT_MESSAGES)
    messages: list[dict[str, Any]] = []
    text_like = h.is_text_like(stream.content_type)
    offset = Offset(start)
    while offset.seq < tail:
        result = await reads.read(engine, stream, offset, RECENT_BYTES, whole=True)
        for index, chunk in enumerate(result.chunks):
            seq = offset.seq + index
            entry: dict[str, Any] = {"offset": encode_seq(seq), "size": len(chunk)}
            if text_like:
                entry["text"] = chunk.decode("utf-8", errors="replace")
            else:
                entry["hex"] = chunk[:HEX_BYTES].hex()
            entry["ts_ms"] = result.stamps[index] if index < len(result.stamps) else None
            messages.append(entry)
        if not result.chunks:
            break
        offset = Offset(offset.seq + len(result.chunks))
    return {"stream": _row(engine, stream, engine.clock()), "messages": messages, "next_offset": encode_seq(tail)}
