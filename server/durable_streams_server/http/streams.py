"""HTTP handlers for one stream URL: parse the request, call the engine, render headers.

No protocol decisions are made here: header syntax lives in ``protocol.headers``, state
rules in the engine. What is here is the mapping between HTTP and those two.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from ..engine import reads
from ..engine.engine import Engine
from ..engine.memory_writes import WriteAdmission
from ..engine.stream import Stream
from ..engine.types import AppendOutcome, AppendRequest, AppendResult, CreateRequest
from ..protocol import bulk, preconditions, retention
from ..protocol import headers as h
from ..protocol.cursor import response_cursor
from ..protocol.errors import BadRequest
from ..protocol.offsets import BEGINNING_SENTINEL, NOW_SENTINEL, Offset, encode_seq, parse_offset
from . import arrow_ipc, multipart, sse
from .answers import Answer
from .bodies import RequestBodies
from .limits import HttpLimits, LiveReaders
from .ports import RemoteForks
from .read_answers import (
    ANSWER_AFTER_WAKE,
    ANSWERED_AT_WAKE,
    CACHEABLE,
    Found,
    Framing,
    ParkedLongPoll,
    Parking,
    empty,
    etag,
    position_headers,
    stream_headers,
)
from .request_fields import header, query
from .responses import location
from .retention import retention_headers
from .targets import stream_name_from_reference

_SUB_OFFSET_HEADER_RE = re.compile(r"^(0|[1-9][0-9]{0,15})$")

# Request headers are looked up by their lower-case names: the fast path hands the handlers a plain
# dict of a request's headers by name as the HTTP/1.1 parser delivers them (lower-cased, the first of
# a repeated one: ``fastpath/route.py``), and Starlette's ``Headers.get`` lower-cases the name it is given.
_TTL, _EXPIRES_AT, _CLOSED, _SEQ, _IF_MATCH = (
    name.lower() for name in (h.STREAM_TTL, h.STREAM_EXPIRES_AT, h.STREAM_CLOSED, h.STREAM_SEQ, preconditions.IF_MATCH)
)
_FORKED_FROM, _FORK_OFFSET, _FORK_SUB_OFFSET = (
    name.lower() for name in (h.STREAM_FORKED_FROM, h.STREAM_FORK_OFFSET, h.STREAM_FORK_SUB_OFFSET)
)
_PRODUCER_ID, _PRODUCER_EPOCH, _PRODUCER_SEQ = (
    name.lower() for name in (h.PRODUCER_ID, h.PRODUCER_EPOCH, h.PRODUCER_SEQ)
)


class StreamHandlers:
    def __init__(
        self,
        engine: Engine,
        limits: HttpLimits,
        live_readers: LiveReaders,
        remote_forks: RemoteForks | None = None,
        writes: WriteAdmission | None = None,
    ) -> None:
        self.engine = engine
        self.remote_forks = remote_forks
        """Forks of streams this server does not hold: other shards', on a cluster's shard server (``ports``)."""
        self.limits = limits
        self.live_readers = live_readers
        self.bodies = RequestBodies(limits, writes)
        """Request bodies: their limit, deadline and admission to the memory budget (``bodies``)."""
        self.answered_at_wake = 0
        """Long-polls answered at their wake (``read_answers.Parking``; tests check the path is taken)."""

    # -- PUT: create --------------------------------------------------------------------

    async def create(self, request: Request, name: str) -> Response:
        status, headers = await self.create_stream(
            name, request.headers, request.scope, lambda: self.bodies.of(request)
        )
        return Response(status_code=status, headers=headers)

    async def create_stream(
        self, name: str, headers: Mapping[str, str], scope: Scope, body: Callable[[], Awaitable[bytes]]
    ) -> tuple[int, dict[str, str]]:
        """A create (PUT), its body read when the headers have been checked: the status and
        headers to answer. Also the fast path's (``fastpath/route.py``), with the headers in a plain dict."""
        ttl_raw, expires_raw = headers.get(_TTL), headers.get(_EXPIRES_AT)
        if ttl_raw is not None and expires_raw is not None:
            raise BadRequest("Stream-TTL and Stream-Expires-At cannot both be set", code="INVALID_TTL")
        ttl_s = h.parse_ttl(ttl_raw)
        expires_at = h.parse_expires_at(expires_raw)
        fork_from = headers.get(_FORKED_FROM)
        fork_offset_raw = headers.get(_FORK_OFFSET)
        sub_raw = headers.get(_FORK_SUB_OFFSET)
        if fork_from is None and (fork_offset_raw is not None or sub_raw is not None):
            raise BadRequest("fork headers need Stream-Forked-From", code="INVALID_FORK")
        if sub_raw is not None and not _SUB_OFFSET_HEADER_RE.match(sub_raw):
            raise BadRequest(f"invalid Stream-Fork-Sub-Offset {sub_raw!r}", code="INVALID_FORK_SUB_OFFSET")
        create = CreateRequest(
            name=name,
            content_type=h.parse_content_type(headers.get("content-type")),
            ttl_s=ttl_s,
            expires_at=expires_raw.strip() if expires_raw is not None else None,
            expires_at_ms=int(expires_at.timestamp() * 1000) if expires_at is not None else None,
            closed=h.is_closed_flag(headers.get(_CLOSED)),
            body=await body(),
            fork_from=stream_name_from_reference(fork_from) if fork_from is not None else None,
            fork_offset=parse_offset(fork_offset_raw) if fork_offset_raw is not None else None,
            fork_sub_offset=int(sub_raw) if sub_raw is not None else None,
            retention=retention.parse_changes(headers),
        )
        if self.remote_forks is not None and self.remote_forks.applies(create):
            outcome = await self.remote_forks.create(create)
        else:
            outcome = await self.engine.create(create)
        stream = outcome.stream
        response_headers = {"Content-Type": stream.content_type, h.STREAM_NEXT_OFFSET: encode_seq(outcome.tail)}
        if outcome.created:
            response_headers["Location"] = location(scope)
        if stream.closed:
            response_headers[h.STREAM_CLOSED] = "true"
        return (201 if outcome.created else 200), response_headers

    # -- POST: append / close -----------------------------------------------------------

    async def append(self, request: Request, name: str) -> Response:
        headers = request.headers
        producer, close = append_flags(headers)
        body = await self.bodies.of(request)
        bulk_type = headers.get(bulk.BULK_CONTENT_TYPE)
        if bulk_type is not None:
            return await self._bulk_append(name, request, body, bulk_type, producer, close)
        status, response_headers = await self.plain_append(name, headers, body, producer, close)
        return Response(status_code=status, headers=response_headers)

    async def plain_append(
        self, name: str, headers: Mapping[str, str], body: bytes, producer: h.ProducerHeaders | None, close: bool
    ) -> tuple[int, dict[str, str]]:
        """An append of one body (not the bulk extension): the status and headers to answer.
        Also the fast path's (``fastpath/route.py``), with the request's headers in a plain dict."""
        content_type = None
        if body:
            content_type = h.parse_content_type(headers.get("content-type"))
            if content_type is None:
                raise BadRequest("Content-Type is required when appending data", code="MISSING_CONTENT_TYPE")
        elif not close:
            raise BadRequest("an append needs a body (or Stream-Closed: true to close)", code="EMPTY_BODY")
        if_match = headers.get(_IF_MATCH)
        outcome = await self.engine.append(
            name, AppendRequest(body, content_type, producer, headers.get(_SEQ), close, if_match=if_match)
        )
        status = 200 if outcome.result is AppendResult.STORED_FOR_PRODUCER else 204
        return status, _append_headers(outcome, if_match is not None)

    async def _bulk_append(
        self, name: str, request: Request, body: bytes, bulk_type: str, producer: h.ProducerHeaders | None, close: bool
    ) -> Response:
        """The bulk append extension (``protocol.bulk``): many messages, one request, one record."""
        if h.normalize_content_type(request.headers.get("content-type") or "") != bulk.ARROW_STREAM:
            raise BadRequest(
                f"{bulk.BULK_CONTENT_TYPE} needs Content-Type: {bulk.ARROW_STREAM}", code="INVALID_BULK_BODY"
            )
        content_type = h.parse_content_type(bulk_type)
        if content_type is None:
            raise BadRequest(f"{bulk.BULK_CONTENT_TYPE} is empty", code="MISSING_CONTENT_TYPE")
        messages = bulk.parse_body(body)
        stream = self.engine.get_live(name)
        same_type = h.normalize_content_type(content_type) == stream.media_type
        # (a mismatch is the engine's 409, whatever the messages are)
        bulk.check_messages(messages, json_stream=same_type and stream.is_json)
        if_match = request.headers.get(_IF_MATCH)
        outcome = await self.engine.append(
            name,
            AppendRequest(
                b"", content_type, producer, request.headers.get(_SEQ), close, batch=messages, if_match=if_match
            ),
        )
        status = 200 if outcome.result is AppendResult.STORED_FOR_PRODUCER else 204
        return Response(status_code=status, headers=_append_headers(outcome, if_match is not None))

    # -- DELETE / HEAD ------------------------------------------------------------------

    async def delete(self, name: str) -> Response:
        await self.engine.delete(name)
        return Response(status_code=204)

    async def head(self, name: str) -> Answer:
        stream = self.engine.get_live(name)
        headers = {
            "Content-Type": stream.content_type,
            h.STREAM_NEXT_OFFSET: encode_seq(stream.visible_tail),
            h.STREAM_INCARNATION: stream.incarnation,
            h.STREAM_FLUSHED_OFFSET: encode_seq(min(stream.flushed_tail, stream.visible_tail)),
            "Cache-Control": "no-store",
            "ETag": etag(stream, BEGINNING_SENTINEL, encode_seq(stream.visible_tail), stream.visible_closed),
            bulk.BULK_APPEND: bulk.ARROW_STREAM,
            preconditions.CONDITIONAL_APPEND: preconditions.IF_MATCH,
        }
        if stream.ttl_s is not None:
            headers[h.STREAM_TTL] = str(stream.ttl_s)
        if stream.expires_at is not None:
            headers[h.STREAM_EXPIRES_AT] = stream.expires_at
        if stream.visible_closed:
            headers[h.STREAM_CLOSED] = "true"
        if stream.snapshot_seq is not None:
            headers[h.STREAM_SNAPSHOT_OFFSET] = encode_seq(stream.snapshot_seq)
        headers.update(retention_headers(self.engine, stream))
        return Answer(200, headers)

    # -- GET: catch-up, long-poll, SSE --------------------------------------------------

    async def read(self, request: Request, name: str, parking: Parking = ANSWER_AFTER_WAKE) -> Response | Answer:
        """A read, long-poll or SSE of ``name``. ``parking``: the connection's, which may answer a
        plain long-poll at its wake itself (``read_answers.Parking``). Its data, a ``304``, a
        long-poll's ``204`` and ``offset=now`` as an ``Answer``; SSE and the framing extensions as a ``Response``."""
        params = query(request.scope)
        offsets = params.getlist("offset")
        if len(offsets) > 1:
            raise BadRequest("only one offset parameter is allowed", code="INVALID_OFFSET")
        offset_raw = offsets[0] if offsets else None
        if offset_raw == "":
            raise BadRequest("the offset parameter is empty", code="INVALID_OFFSET")
        live = params.get("live")
        if live is not None and live not in ("long-poll", "sse"):
            raise BadRequest(f"unknown live mode {live!r}", code="INVALID_LIVE")
        if live is not None and offset_raw is None:
            raise BadRequest(f"live={live} needs an offset", code="INVALID_OFFSET")
        start = None
        if offset_raw not in (None, BEGINNING_SENTINEL, NOW_SENTINEL):
            start = parse_offset(offset_raw)
        stream = self.engine.get_live(name)
        self.engine.touch(stream)
        if offset_raw == NOW_SENTINEL:
            start = Offset(stream.visible_tail)
            if live is None:
                return self._now_response(stream)
        if start is None:
            start = Offset(0)
        cursor = params.get("cursor")
        if live == "sse":
            reads.check_start(self.engine, stream, start)
            self.live_readers.admit(request.scope, "sse")
            return sse.response(self.engine, stream, start, cursor, self.limits, self.live_readers.ending())
        # Extensions: "Accept: multipart/mixed" frames each message as its own MIME part,
        # "Accept: application/vnd.apache.arrow.stream" answers an Arrow IPC stream.
        accept = header(request.scope, b"accept")
        framing: Framing = (
            "arrow" if arrow_ipc.wants_arrow(accept) else "multipart" if multipart.wants_multipart(accept) else "plain"
        )
        stop = arrow_ipc.stop_seq(params.get("end")) if framing == "arrow" else None
        result = await self._read_once(stream, start, framing, stop)
        token = offset_raw or BEGINNING_SENTINEL
        if live == "long-poll" and empty(result):
            if not result.closed and not self.live_readers.ended:  # (stopping: answered now)
                self.live_readers.admit(request.scope, "long-poll")
                answered = False
                at_wake = None
                answer = None
                if framing == "plain":
                    answer = parking.at_wake(
                        ParkedLongPoll(
                            self.engine,
                            stream,
                            start,
                            token,
                            cursor,
                            header(request.scope, b"if-none-match"),
                            self.limits.max_read_bytes,
                        )
                    )
                if answer is not None:
                    answer_at_wake = answer

                    def at_wake() -> None:
                        nonlocal answered
                        answered = answer_at_wake()
                        self.answered_at_wake += answered

                await reads.wait_for_change(
                    stream, start.seq, self.limits.long_poll_timeout_s, at_wake, until=self.live_readers.ending()
                )
                if answered:
                    return ANSWERED_AT_WAKE  # (written already)
                stream = self.engine.get_live(name)
                self.engine.touch(stream)
                result = await self._read_once(stream, start, framing, stop)
            if empty(result):
                return self._long_poll_empty(result, cursor)
        return self._data_response(request, result, token, live, cursor, framing)

    async def _read_once(self, stream: Stream, start: Offset, framing: Framing, stop: int | None) -> Found:
        limit = self.limits.max_read_bytes
        if framing == "plain":
            read_plain = reads.read_json_body if stream.is_json else reads.read_body
            return await read_plain(self.engine, stream, start, limit)
        if framing == "arrow":
            return await reads.read_slice(self.engine, stream, start, limit * arrow_ipc.BUDGET_FACTOR, stop=stop)
        return await reads.read(self.engine, stream, start, limit, whole=framing == "multipart")

    def _now_response(self, stream: Stream) -> Answer:
        headers = {
            "Content-Type": stream.content_type,
            h.STREAM_NEXT_OFFSET: encode_seq(stream.visible_tail),
            h.STREAM_UP_TO_DATE: "true",
            h.STREAM_INCARNATION: stream.incarnation,
            "Cache-Control": "no-store",
        }
        if stream.visible_closed:
            headers[h.STREAM_CLOSED] = "true"
        return Answer(200, headers, b"[]" if stream.is_json else b"")

    def _long_poll_empty(self, result: Found, cursor: str | None) -> Answer:
        headers = {
            h.STREAM_NEXT_OFFSET: result.next.encode(),
            h.STREAM_UP_TO_DATE: "true",
            h.STREAM_INCARNATION: result.stream.incarnation,
            "Cache-Control": "no-store",
        }
        if result.closed:
            headers[h.STREAM_CLOSED] = "true"
        else:
            headers[h.STREAM_CURSOR] = response_cursor(cursor, time.time())
        return Answer(204, headers)

    def _data_response(
        self,
        request: Request,
        result: Found,
        start_token: str,
        live: str | None,
        cursor: str | None,
        framing: Framing,
    ) -> Response | Answer:
        stream = result.stream
        headers = {**stream_headers(stream), **position_headers(result, start_token, live, cursor, framing)}
        tag = headers["ETag"]
        if header(request.scope, b"if-none-match") == tag:
            return Answer(304, {"ETag": tag, "Cache-Control": CACHEABLE})
        if isinstance(result, reads.Body):  # (no messages of a JSON stream: an empty array)
            return Answer(200, headers, result.parts or ([b"[]"] if stream.is_json else []))
        if isinstance(result, reads.Slice):
            headers["Content-Type"] = arrow_ipc.ARROW_STREAM
            return Response(arrow_ipc.body(result, stream.content_type), status_code=200, headers=headers)
        assert framing == "multipart", framing  # (``_read_once``: a plain read is a ``Body``)
        boundary = multipart.new_boundary()
        headers["Content-Type"] = multipart.content_type(boundary)
        parts = multipart.message_parts(boundary, stream.content_type, result.start, result.chunks, result.stamps)
        return Response(parts + multipart.closing(boundary), status_code=200, headers=headers)


def append_flags(headers: Mapping[str, str]) -> tuple[h.ProducerHeaders | None, bool]:
    """An append's idempotent-producer headers (all three or none) and whether it closes."""
    producer = h.parse_producer(headers.get(_PRODUCER_ID), headers.get(_PRODUCER_EPOCH), headers.get(_PRODUCER_SEQ))
    return producer, h.is_closed_flag(headers.get(_CLOSED))


def _append_headers(outcome: AppendOutcome, conditional: bool = False) -> dict[str, str]:
    """A successful append's headers; a conditional one's (``conditional``) with the new tail's ``ETag``."""
    headers: dict[str, str] = {}
    if outcome.include_offset:
        headers[h.STREAM_NEXT_OFFSET] = encode_seq(outcome.tail)
    if conditional:
        headers["ETag"] = preconditions.etag(outcome.tail)
    if outcome.closed:
        headers[h.STREAM_CLOSED] = "true"
    if outcome.producer_epoch is not None:
        headers[h.PRODUCER_EPOCH] = str(outcome.producer_epoch)
    if outcome.producer_seq is not None:
        headers[h.PRODUCER_SEQ] = str(outcome.producer_seq)
    return headers
