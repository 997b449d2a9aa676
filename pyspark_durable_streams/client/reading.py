"""Reading a stream as an iterator of messages: catch-up, long-poll and SSE (spec 5.6-5.8).

One ``StreamReader`` runs one read session. Every response body is consumed as it
streams in and cut into messages by ``_framing``, so memory stays bounded by one message
(or one server read slice) however long the stream is. The reader remembers the offset
to resume from, echoes the server's cursor, stops at EOF (``Stream-Closed`` /
``streamClosed``), reconnects SSE when the server ends the connection (it does so about
once a minute by design), and retries connection failures, 5xx and 429 with backoff from
the offset it has reached, so a restarting server does not end a tail.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator, Iterable, Iterator, Mapping
from functools import partial
from types import TracebackType
from typing import Literal

import requests

from . import errors
from ._framing import Part, iter_json_array, iter_parts, multipart_boundary
from ._http import HTTP, Backoff, Timeout, UseDefault, flag, guard, header
from .models import Message, is_json, media_type
from .sse import Control, Data, iter_events

LiveMode = Literal["long-poll", "sse"]
BEGINNING = "-1"
NOW = "now"
MULTIPART_ACCEPT = "multipart/mixed"
_CHUNK_BYTES = 64 * 1024
MAX_ITEM_BYTES = 4 * 1024 * 1024
"""Byte streams without boundaries: responses bigger than this are handed out in slices."""


class StreamReader(Iterator[Message]):
    """Iterate messages from ``offset``; ``live`` keeps following after the current end.

    Without ``live`` iteration stops once caught up. With ``live`` it stops only at EOF
    (the stream was closed) or when ``close()`` is called. Use it as a context manager to
    release the connection early. ``offset`` is always a safe place to resume from.
    """

    def __init__(
        self,
        transport: HTTP,
        url: str,
        *,
        offset: str = BEGINNING,
        live: LiveMode | None = None,
        boundaries: bool = True,
        content_type: str | None = None,
        cursor: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout | UseDefault,
        backoff: Backoff,
    ) -> None:
        self._transport = transport
        self._url = url
        self._live = live
        self._boundaries = boundaries
        self._headers = dict(headers or {})
        self._timeout = timeout
        self._backoff = backoff
        self._response: requests.Response | None = None
        self._confirm_eof = False
        self.offset = offset
        """Where a new read would continue without skipping anything handed out so far."""
        self.cursor = cursor
        self.content_type = content_type
        self.up_to_date = False
        self.closed = False
        """True once EOF was seen: the stream is closed and everything in it was read."""
        self._messages = self._run()

    def __next__(self) -> Message:
        return next(self._messages)

    def __enter__(self) -> StreamReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop reading and release the connection."""
        self._messages.close()
        self._release()

    # -- the loop ------------------------------------------------------------------------

    def _run(self) -> Generator[Message, None, None]:
        retry = Retrying(self._backoff)
        while not self.closed:
            try:
                for message in self._one_request():
                    retry.progressed()
                    yield message
            except Retrying.TRANSIENT as exc:
                retry.pause(exc)
                continue
            finally:
                self._release()
            if self._live is None and self.up_to_date:
                return

    def _one_request(self) -> Iterator[Message]:
        if self._live == "sse":
            return self._sse()
        return self._http_read()

    def _open(self, params: dict[str, str], accept: str | None) -> requests.Response:
        headers = dict(self._headers)
        if accept is not None:
            headers["Accept"] = accept
        self._response = self._transport.request(
            "GET", self._url, ok=(200, 204), params=params, headers=headers, timeout=self._timeout, stream=True
        )
        return self._response

    def _release(self) -> None:
        if self._response is not None:
            self._response.close()
            self._response = None

    def _params(self) -> dict[str, str]:
        params = {"offset": self.offset}
        if self._live is not None and not self._confirm_eof:
            params["live"] = self._live
            if self.cursor is not None:
                params["cursor"] = self.cursor
        return params

    # -- catch-up and long-poll ----------------------------------------------------------

    def _http_read(self) -> Iterator[Message]:
        response = self._open(self._params(), MULTIPART_ACCEPT if self._boundaries else None)
        start = self.offset
        next_offset = header(response, "Stream-Next-Offset")
        if next_offset is None:
            raise errors.ResponseError(f"GET {response.url} answered {response.status_code} without Stream-Next-Offset")
        self.cursor = header(response, "Stream-Cursor") or self.cursor
        response_type = header(response, "Content-Type") or ""
        if response.status_code == 200:
            boundary = multipart_boundary(response_type)
            body = body_chunks(response)
            if boundary is not None:
                messages = part_messages(iter_parts(body, boundary), self.content_type, next_offset, self._url)
            else:
                self.content_type = response_type or self.content_type
                messages = _batch_messages([body], self.content_type, _real(start), next_offset)
            for message in messages:
                yield self._handed_out(message)
        self.offset = next_offset
        self.up_to_date = flag(response, "Stream-Up-To-Date") or response.status_code == 204
        self.closed = flag(response, "Stream-Closed")
        # EOF from a long-poll 204 is confirmed by one catch-up read: the reference server
        # answers a waiting long-poll 204 + Stream-Closed even when the close carried a final
        # append, with Stream-Next-Offset still before that data.
        self._confirm_eof = self.closed and response.status_code == 204
        self.closed = self.closed and not self._confirm_eof

    def _handed_out(self, message: Message) -> Message:
        if message.next_offset is not None:
            self.offset = message.next_offset
        self.content_type = message.content_type
        return message

    # -- SSE -----------------------------------------------------------------------------

    def _sse(self) -> Iterator[Message]:
        if self.content_type is None:
            self.content_type = self._transport.request(
                "HEAD", self._url, ok=(200,), headers=self._headers, timeout=self._timeout
            ).headers.get("Content-Type", "")
        response = self._open(self._params(), "text/event-stream")
        encoded = (header(response, "Stream-SSE-Data-Encoding") or "").lower() == "base64"
        pending: list[bytes] = []
        for event in iter_events(body_chunks(response), base64_encoded=encoded):
            if isinstance(event, Data):
                pending.append(event.payload)
                continue
            if pending:
                # Each data event is framed on its own (a server may send one JSON array per message).
                bodies = [[payload] for payload in pending]
                pending = []
                for message in _batch_messages(bodies, self.content_type, _real(self.offset), event.next_offset):
                    yield self._handed_out(message)
            self._apply(event)
            if event.closed:
                return

    def _apply(self, control: Control) -> None:
        self.offset = control.next_offset
        self.cursor = control.cursor or self.cursor
        self.up_to_date = control.up_to_date
        self.closed = control.closed


class Retrying:
    """Backoff between the attempts of a read: connection failures, 5xx and 429 (after its
    ``Retry-After``) are retried from the offset reached until the backoff's deadline;
    progress starts a fresh backoff, so a long read survives a server restart."""

    TRANSIENT = errors.TRANSIENT

    def __init__(self, backoff: Backoff) -> None:
        self._backoff = backoff
        self._delays: Iterator[float] | None = None

    def progressed(self) -> None:
        self._delays = None

    def pause(self, exc: errors.DurableStreamsError) -> None:
        """Sleep before the next attempt; re-raise ``exc`` once the deadline is spent."""
        self._delays = self._delays or self._backoff.delays()
        delay = next(self._delays, None)
        if delay is None:
            raise exc
        self._backoff.pause(delay, exc)


def part_messages(parts: Iterator[Part], content_type: str | None, end: str, url: str) -> Iterator[Message]:
    """One message per multipart part (boundaries extension, ``/bootstrap``).

    A part's own offset is its ``Stream-Offset`` header and its end is the next part's
    offset, hence one part of lookahead; the last part ends at the response's next offset.
    """
    pending: Message | None = None
    try:
        for part in parts:
            message = Message(
                data=part.body,
                content_type=part.headers.get("content-type", content_type or ""),
                offset=part.headers.get("stream-offset"),
                next_offset=None,
                timestamp_ms=_int_or_none(part.headers.get("stream-timestamp")),
            )
            if pending is not None:
                yield _with_end(pending, message.offset)
            pending = message
    except ValueError as exc:
        raise errors.ResponseError(f"GET {url}: malformed multipart body: {exc}") from exc
    if pending is not None:
        yield _with_end(pending, end)


def _batch_messages(
    bodies: Iterable[Iterable[bytes]], content_type: str | None, start: str | None, end: str
) -> Iterator[Message]:
    """Messages of ordinary (non-multipart) bodies: JSON array items, or slices of bytes.

    Offsets are known only at the edges of the batch (``start`` to ``end``), see ``Message``.
    """
    content_type = content_type or ""
    text = media_type(content_type).startswith("text/")
    frame = iter_json_array if is_json(content_type) else partial(_slices, text=text)
    items = itertools.chain.from_iterable(frame(body) for body in bodies)
    previous: bytes | None = None
    first = True
    try:
        for item in items:
            if previous is not None:
                yield Message(previous, content_type, start if first else None, None)
                first = False
            previous = item
    except ValueError as exc:
        raise errors.ResponseError(f"malformed JSON array in a read response: {exc}") from exc
    if previous is not None:
        yield Message(previous, content_type, start if first else None, end)


def _slices(chunks: Iterable[bytes], *, text: bool) -> Iterator[bytes]:
    """A byte body as items of at most ``MAX_ITEM_BYTES``: one item per ordinary response,
    slices of a bigger one. Text slices end on whole UTF-8 characters so each decodes."""
    buffer = bytearray()
    for chunk in chunks:
        buffer += chunk
        if len(buffer) >= MAX_ITEM_BYTES:
            cut = _utf8_boundary(buffer) if text else len(buffer)
            yield bytes(buffer[:cut])
            del buffer[:cut]
    if buffer:
        yield bytes(buffer)


def _utf8_boundary(data: bytearray) -> int:
    """The length of the longest prefix that does not end inside a multi-byte character."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)
        if byte >= 0xC0:  # a lead byte: complete if its sequence fits in what we have
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if needed <= back else len(data) - back
    return len(data)


def body_chunks(response: requests.Response) -> Iterator[bytes]:
    method = response.request.method or "GET"
    with guard(method, response.url):
        # chunk_size=None yields HTTP chunks as they arrive, which live SSE needs; a body
        # with a Content-Length is read in bounded blocks instead of in one piece.
        yield from response.iter_content(None if response.raw.chunked else _CHUNK_BYTES)


def _with_end(message: Message, end: str | None) -> Message:
    return Message(message.data, message.content_type, message.offset, end, message.timestamp_ms)


def _real(offset: str) -> str | None:
    """Sentinels are not positions: a message read from ``-1`` or ``now`` has no known start."""
    return None if offset in (BEGINNING, NOW) else offset


def _int_or_none(raw: str | None) -> int | None:
    return int(raw) if raw is not None and raw.isdigit() else None
