"""The headers of a read's answer, on both paths.

A read's data answer carries two kinds of headers: those of the stream (``stream_headers``:
its content type, incarnation, caching) and those of the read (``position_headers``: where it
ended, its ETag, whether it is at the tail or closed, a live read's cursor). The app's path
renders both through Starlette's ``Response`` (``StreamHandlers._data_response``); a long-poll
answered at its wake renders them as head lines (``fastpath.parked.ParkedRead``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from ..engine import reads
from ..engine.stream import Stream
from ..engine.types import ReadResult
from ..protocol import headers as h
from ..protocol.cursor import response_cursor

CACHEABLE = "public, max-age=60, stale-while-revalidate=300"
Framing = Literal["plain", "multipart", "arrow"]
_ETAG_SUFFIX: dict[Framing, str] = {"plain": "", "multipart": ":m", "arrow": ":a"}
AnswerNow = Callable[[int, bytes, bytes], bool]
"""Writes an answer (status, header lines, body) at once if the connection can take it
(``DirectCycle.answer_now``); ``False``: it cannot."""


def etag(stream: Stream, start: str, end: str, closed: bool, framing: Framing = "plain") -> str:
    return f'"{stream.uid}:{start}:{end}{":c" if closed else ""}{_ETAG_SUFFIX[framing]}"'


def stream_headers(stream: Stream) -> dict[str, str]:
    """A data answer's headers that depend on the stream alone (first, in this order)."""
    return {
        "Content-Type": stream.content_type,
        h.STREAM_INCARNATION: stream.incarnation,
        "Cache-Control": CACHEABLE,
        "Vary": "Accept",
    }


def position_headers(
    result: ReadResult | reads.Slice, start: str, live: str | None, cursor: str | None, framing: Framing = "plain"
) -> dict[str, str]:
    """A data answer's headers that depend on the read (after ``stream_headers``); ``start``: the
    offset the read was asked from, as given (its ETag names it)."""
    end = result.next.encode()
    headers = {h.STREAM_NEXT_OFFSET: end, "ETag": etag(result.stream, start, end, result.closed, framing)}
    if result.up_to_date:
        headers[h.STREAM_UP_TO_DATE] = "true"
    if result.closed:
        headers[h.STREAM_CLOSED] = "true"
    if live == "long-poll" or not result.closed:
        headers[h.STREAM_CURSOR] = response_cursor(cursor, time.time())
    return headers
