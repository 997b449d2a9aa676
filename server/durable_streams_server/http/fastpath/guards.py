"""The guards every request head gets, whether or not the fast path serves the request.

Two guards, the same for both parsers:

- **Head deadline.** uvicorn times out a connection only while it idles *after* a
  response (keep-alive). A client that connects and sends nothing, or dribbles a request
  head a byte at a time, would hold its connection -- and a ``--max-connections`` slot --
  forever. Here a request head must be complete within ``head_timeout_s`` of the
  connection opening or of the previous response; otherwise the connection is closed
  (there is no request to answer). Bodies have their own deadline in the app
  (``limits.BodyDeadline``: 408).
- **Incomplete heads over ``max_header_bytes``.** A head that is complete reaches the app,
  whose limits answer 431 with the JSON error body. A head still incomplete beyond the
  limit must not be buffered further: h11 refuses it itself
  (``h11_max_incomplete_event_size``: uvicorn's plain 400, then close); httptools cannot be
  told to, so ``GuardedHttpToolsProtocol`` counts the bytes fed to its parser while a head
  is pending and answers 431 + close once they pass the limit.

A refusal of a broken or oversized *head* (uvicorn's 400 for bytes httptools cannot parse,
our 431) closes the connection -- but with httptools, requests pipelined before it on the
same connection may still be in their handlers: their answers go first, then the refusal
(``_refuse``), so a client never reads a 400 for a request the server went on to execute.
Nothing after the refused bytes is read.

These classes add to uvicorn's protocols and leave its request handling as it is; the fast
path's protocol (``protocol.FastPathProtocol``) builds on ``GuardedHttpToolsProtocol``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from http import HTTPStatus
from typing import ClassVar

from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ...protocol.errors import HeadersTooLarge, ProtocolError
from ..responses import error_response
from .deadline import ClosingDeadline


def _raw_response(error: ProtocolError) -> bytes:
    """``error_response(error)`` as the bytes of an HTTP/1.1 response, for the protocol to
    write itself (there is no request for the app to answer)."""
    response = error_response(error)
    head = b"".join(b"%s: %s\r\n" % pair for pair in response.raw_headers)
    status = HTTPStatus(response.status_code)
    return b"HTTP/1.1 %d %s\r\n%s\r\n%s" % (status.value, status.phrase.encode(), head, response.body)


_TOO_LARGE = _raw_response(
    HeadersTooLarge("the request line and headers are too large", headers={"Connection": "close"})
)


class GuardedH11Protocol(H11Protocol):
    head_timeout_s: ClassVar[float] = 30.0
    before_shutdown: ClassVar[tuple[Callable[[], None], ...]] = ()
    """Called when uvicorn begins to stop, before it waits for the connections to close (it
    asks every connection to ``shutdown``; each hook must be idempotent)."""
    _head_timer: ClosingDeadline
    _scope_before: object = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_timer = ClosingDeadline(self.loop, self.head_timeout_s)
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_timer.cancel()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        for hook in self.before_shutdown:
            hook()
        super().shutdown()

    def handle_events(self) -> None:
        super().handle_events()
        if self._head_timer.armed and self.scope is not self._scope_before:
            self._head_timer.stop()  # a new request head was parsed

    def on_response_complete(self) -> None:
        self._await_head()  # before super(): it may parse a pipelined head at once
        super().on_response_complete()

    def _await_head(self) -> None:
        self._scope_before = self.scope
        self._head_timer.arm(self.transport)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    head_timeout_s: ClassVar[float] = 30.0
    before_shutdown: ClassVar[tuple[Callable[[], None], ...]] = ()
    """As ``GuardedH11Protocol.before_shutdown``."""
    max_head_bytes: ClassVar[int] = 0
    """0: no limit."""

    _head_timer: ClosingDeadline
    _head_pending = True
    """Between the end of a request (or the connection's start) and the next parsed head."""
    _head_seen = 0
    """Bytes fed to the parser while a head was pending (at most one read too few)."""
    _refusal: Callable[[], None] | None = None
    """A head's refusal waiting for the answers to the requests before it (``_refuse``)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_timer = ClosingDeadline(self.loop, self.head_timeout_s)
        super().connection_made(transport)
        self._head_timer.arm(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_timer.cancel()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        for hook in self.before_shutdown:
            hook()
        super().shutdown()

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            return  # (the parser stopped at the refused bytes)
        limit = self.max_head_bytes
        if limit and self._head_pending:
            self._head_seen += len(data)
        super().data_received(data)
        if limit and self._head_pending and self._head_seen > limit and not self.transport.is_closing():
            self._refuse(self._send_too_large)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes the parser refused, after the answers before it."""
        self._refuse(partial(super().send_400_response, msg))

    def _send_too_large(self) -> None:
        self.transport.write(_TOO_LARGE)
        self.transport.close()

    def _refuse(self, refusal: Callable[[], None]) -> None:
        """Refuse a request head (and close) now, or once the requests before it on this
        connection are answered. A broken *body* is its own request's: refused at once."""
        waiting = bool(self.pipeline) or (self.cycle is not None and not self.cycle.response_complete)
        if not waiting or not self._head_pending:
            refusal()
            return
        self._refusal = refusal
        self.flow.pause_reading()

    def on_headers_complete(self) -> None:
        self._head_parsed()
        super().on_headers_complete()

    def _head_parsed(self) -> None:
        self._head_pending = False
        self._head_timer.stop()

    def on_message_complete(self) -> None:
        self._head_pending = True
        self._head_seen = 0
        super().on_message_complete()

    def on_response_complete(self) -> None:
        """uvicorn's (``_next_request``), with the head deadline, and a refusal waiting for this answer."""
        if self._head_pending and not self.pipeline:
            self._head_timer.arm(self.transport)  # no next head parsed yet: its deadline starts
        self._next_request()
        refusal = self._refusal
        if refusal is not None and not self.pipeline and self.cycle.response_complete:
            self._head_timer.stop()
            if not self.transport.is_closing():
                refusal()

    def _next_request(self) -> None:
        """Start the next pipelined request, or arm the keep-alive timeout (uvicorn's)."""
        HttpToolsProtocol.on_response_complete(self)
