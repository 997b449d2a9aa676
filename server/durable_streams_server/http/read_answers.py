"""The headers of a read's answer, on both paths.

A read's data answer carries two kinds of headers: those of the stream (``stream_headers``:
its content type, incarnation, caching) and those of the read (``position_headers``: where it
ended, its ETag, whether it is at the tail or closed, a live read's cursor). The handler answers
with both in an ``answers.Answer`` (``StreamHandlers._data_response``), which the app's path makes
a Starlette ``Response`` and the fast path renders as head lines, as a long-poll answered at its
wake does.

Answering at the wake is the connection's business, not the handler's: a handler about to park
a plain long-poll asks the request's ``Parking`` what to run at the wake (``at_wake``). The ASGI
path's answers nothing there (``ANSWER_AFTER_WAKE``); the fast path's connection can write an
answer from the group commit's completion (``fastpath.parked``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from starlette.responses import Response

from ..engine import reads
from ..engine.engine import Engine
from ..engine.stream import Stream
from ..engine.types import ReadResult
from ..protocol import headers as h
from ..protocol.cursor import response_cursor
from ..protocol.offsets import Offset

CACHEABLE = "public, max-age=60, stale-while-revalidate=300"
Found = ReadResult | reads.Slice | reads.Body
"""A read's messages as its framing gathers them: lists, Arrow runs, a binary body's buffers."""
Framing = Literal["plain", "multipart", "arrow"]
_ETAG_SUFFIX: dict[Framing, str] = {"plain": "", "multipart": ":m", "arrow": ":a"}


@dataclass(frozen=True, slots=True)
class ParkedLongPoll:
    """A plain long-poll (no framing extension) about to wait for its wake at ``start``: what an
    answer at the wake needs. ``token``: the offset as asked (its ETag names it)."""

    engine: Engine
    stream: Stream
    start: Offset
    token: str
    cursor: str | None
    if_none_match: str | None
    max_bytes: int


class Parking(Protocol):
    """How the connection serving a request lets a parked long-poll be answered at its wake."""

    def at_wake(self, parked: ParkedLongPoll) -> Callable[[], bool] | None:
        """What to run at the wake itself (``True``: it answered the request, whose handler then
        returns ``ANSWERED_AT_WAKE``), or ``None``: the request's task answers once woken."""


class AnswerAfterWake:
    """The ASGI path's parking: the reader's task answers once woken (its ``send`` is a
    coroutine, so nothing can answer from the wake)."""

    def at_wake(self, parked: ParkedLongPoll) -> None:
        return None


ANSWER_AFTER_WAKE = AnswerAfterWake()
ANSWERED_AT_WAKE = Response(status_code=200)
"""What a long-poll answered at its wake returns to its connection: its status (the bytes are written)."""


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


def empty(result: Found) -> bool:
    if isinstance(result, reads.Slice):
        return result.count == 0
    return not (result.parts if isinstance(result, reads.Body) else result.chunks)


def position_headers(
    result: Found, start: str, live: str | None, cursor: str | None, framing: Framing = "plain"
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
