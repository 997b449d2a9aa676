"""Server-Sent Events (spec section 5.8): a ``data`` event per read slice, each followed by
its ``control`` event; binary streams base64-encoded; the connection closed on EOF and
recycled after about a minute so that CDNs can collapse readers.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator

from starlette.responses import StreamingResponse

from ..engine import reads
from ..engine.engine import Engine
from ..engine.stream import Stream
from ..protocol import headers as h
from ..protocol.cursor import response_cursor
from ..protocol.errors import ProtocolError
from ..protocol.json_mode import frame
from ..protocol.offsets import Offset
from .limits import HttpLimits


def response(
    engine: Engine, stream: Stream, start: Offset, cursor: str | None, limits: HttpLimits, until: asyncio.Future[None]
) -> StreamingResponse:
    """The event stream from ``start``; it ends (as at its reconnect time) once ``until`` is done:
    the server is stopping, and the client resumes from the last control event's offset."""
    binary = not h.is_text_like(stream.content_type)
    # Set directly: Starlette's media_type would append "; charset=utf-8".
    headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "Connection": "keep-alive"}
    if binary:
        headers[h.SSE_DATA_ENCODING] = "base64"
    events = _events(engine, stream, start, cursor, binary, limits, until)
    return StreamingResponse(events, headers=headers)


def _data_event(payload: str) -> bytes:
    """``data:`` lines with no separating space, unless the line itself starts with one
    (an SSE parser strips exactly one leading space)."""
    lines = payload.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    body = "".join(f"data: {line}\n" if line.startswith(" ") else f"data:{line}\n" for line in lines)
    return ("event: data\n" + body + "\n").encode()


def _control_event(fields: dict[str, object]) -> bytes:
    return f"event: control\ndata:{json.dumps(fields, separators=(',', ':'))}\n\n".encode()


async def _events(
    engine: Engine,
    stream: Stream,
    offset: Offset,
    cursor: str | None,
    binary: bool,
    limits: HttpLimits,
    until: asyncio.Future[None],
) -> AsyncIterator[bytes]:
    is_json = stream.is_json
    recycle_at = time.monotonic() + limits.sse_reconnect_s
    name = stream.name
    while True:
        try:
            stream = engine.get_live(name)
            result = await reads.read(engine, stream, offset, limits.max_read_bytes)
        except ProtocolError:
            return  # deleted or expired under us: end the event stream
        engine.touch(stream)
        # A data event and its control event go out in one write, so a reader never
        # sees data without the offset that resumes after it.
        data = b""
        if result.chunks:
            if binary:
                payload = base64.b64encode(b"".join(result.chunks)).decode()
            elif is_json:
                payload = frame(result.chunks).decode("utf-8", errors="replace")
            else:
                payload = b"".join(result.chunks).decode("utf-8", errors="replace")
            data = _data_event(payload)
        offset = result.next
        control: dict[str, object] = {"streamNextOffset": offset.encode()}
        if result.closed:
            control["streamClosed"] = True
            yield data + _control_event(control)
            return
        control["streamCursor"] = response_cursor(cursor, time.time())
        if result.up_to_date:
            control["upToDate"] = True
        if result.chunks or result.up_to_date:
            yield data + _control_event(control)
        if not result.up_to_date:
            continue
        remaining = recycle_at - time.monotonic()
        if remaining <= 0 or until.done():
            return
        await reads.wait_for_change(stream, offset.seq, min(remaining, limits.long_poll_timeout_s), until=until)
