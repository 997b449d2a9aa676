"""The streams view of the status page: a filtered listing, and one stream's recent messages.

The listing takes the stream names on the loop (``Engine.name_snapshot``, or a bucket's own
list: no stream is built for it, no Python string made per cold stream), then on a worker
thread makes them an Arrow column, keeps those the token may read and the filters match (a
bucket; text contained in the name) with Arrow's kernels, and answers only the page of rows it
shows (at most ``MAX_ROWS``). So a server of many streams holds its event loop for a copy of
the names it keeps as Python objects and of a byte per cold stream, not for the walk. Rows
never wake a stream (``peek``): a cold stream is shown from its kept state, so a page left
open does not rebuild idle streams every poll.

Per stream it shows what the engine keeps anyway: the visible tail, messages still readable
(tail minus the earliest readable offset) and that offset, its retention limits, last write,
closure, TTL/expiry, the bytes it retains (``Stream.retained_bytes``: appended minus what its
retention policy let go of; 0 for what was appended before the server counted them) and the
readers waiting at its tail (long-poll and SSE waiters).

A stream's recent messages are read like any read (``engine.reads.read``, whole messages),
at most ``RECENT_MESSAGES`` of them and ``RECENT_BYTES`` in all; text and JSON as text,
anything else as hex of its first ``HEX_BYTES``. The page then follows the stream live over
its own SSE URL from ``next_offset``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ...engine import reads
from ...engine.buckets import bucket_of
from ...engine.engine import Engine
from ...engine.name_snapshots import NameSnapshot
from ...engine.stream import Stream
from ...protocol import headers as h
from ...protocol.errors import BadRequest, NotFound
from ...protocol.ids import BASE_SURFACE_PREFIX
from ...protocol.offsets import Offset, encode_seq
from ...protocol.tokens import TokenGrant
from ..policy import Need

MAX_ROWS = 1000
DEFAULT_ROWS = 200
RECENT_MESSAGES = 20
RECENT_BYTES = 256 * 1024
HEX_BYTES = 256


def peek(engine: Engine, name: str) -> Stream | None:
    """The stream at ``name`` without waking it: the built ``Stream``, else a detached copy made
    from the dormant or sleeping stream's kept state (never entered in the engine's index)."""
    found = engine.live.index.look(name)
    return Stream.from_state(found) if isinstance(found, dict) else found


def may_read(grant: TokenGrant, name: str) -> bool:
    return Need("read", "stream", name).covered_by(grant)


def _rows_param(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_ROWS
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_ROWS:
        raise BadRequest(f"limit must be an integer from 1 to {MAX_ROWS}", code="INVALID_LIMIT")
    return int(raw)


async def list_streams(engine: Engine, grant: TokenGrant, params: dict[str, str]) -> dict[str, Any]:
    """``GET /v1/status/streams?bucket=&q=&limit=``: rows sorted by name (module docstring)."""
    limit = _rows_param(params.get("limit"))
    bucket, text = params.get("bucket", ""), params.get("q", "")
    if bucket:
        found = engine.buckets.by_id.get(bucket)
        ids = found.stream_ids if found is not None else []
        names = NameSnapshot([f"{bucket}/{stream_id}" for stream_id in ids])
    else:
        names = engine.name_snapshot()
    matched, first = await asyncio.to_thread(_first_names, names, grant, text, limit)
    rows = []
    now = engine.clock()
    for name in first:
        stream = peek(engine, name)
        if stream is not None and stream.name == name:
            rows.append(_row(engine, stream, now))
    return {"matched": matched, "streams": rows, "truncated": matched > limit}


async def count_readable(engine: Engine, grant: TokenGrant) -> int:
    """How many streams ``grant`` may read (a walk of the names off the loop, unless all)."""
    if grant.unlimited:
        return len(engine.streams)
    names = engine.name_snapshot()
    return await asyncio.to_thread(lambda: int(pc.sum(readable(names.column(), grant)).as_py() or 0))


def readable(names: pa.ChunkedArray, grant: TokenGrant) -> pa.ChunkedArray:
    """``may_read`` for a column of names: the same rule (``Need.covered_by``) as one test per
    name, as Arrow kernels over the column."""
    if grant.unlimited:
        return pc.is_valid(names)
    mask = pc.equal(pc.binary_length(names), -1)  # (all false)
    for prefix in grant.prefixes:
        mask = pc.or_(mask, pc.starts_with(names, prefix))
    if grant.buckets:
        first_part = pc.list_element(pc.split_pattern(names, "/", max_splits=1), 0)  # (the whole name without "/")
        bucketed = pc.and_(
            pc.invert(pc.starts_with(names, BASE_SURFACE_PREFIX)),
            pc.is_in(first_part, pa.array(sorted(grant.buckets), pa.string())),
        )
        mask = pc.or_(mask, bucketed)
    return mask


def _first_names(snapshot: NameSnapshot, grant: TokenGrant, text: str, limit: int) -> tuple[int, list[str]]:
    """How many of the names pass, and the first ``limit`` of them by name (UTF-8 byte order is
    Python's order of code points). Runs on a worker thread, over the names taken on the loop
    (``NameSnapshot``: no Python string per cold stream): a million names are a filter and a
    partial sort in Arrow's kernels, the filter skipped where everything passes."""
    names = snapshot.column()
    kept = names
    if text or not grant.unlimited:
        keep = readable(names, grant)
        if text:
            keep = pc.and_(keep, pc.match_substring(names, text))
        kept = names.filter(keep)
    matched = len(kept)
    if matched <= limit:
        return matched, sorted(kept.to_pylist())
    first = pc.select_k_unstable(kept, k=limit, sort_keys=[("name", "ascending")])
    # (each name by its index: ``take`` of a column of many chunks joins them first, a copy of all)
    return matched, sorted(str(kept[index].as_py()) for index in first.to_pylist())


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
        "bytes": stream.retained_bytes,
        "earliest_offset": encode_seq(engine.earliest_readable(stream)),
        "retention": stream.retention.policy.to_json() if stream.retention is not None else None,
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
