"""uvicorn's HTTP/1.1 connection handling, plus the guards every request head gets.

Two guards, the same for both parsers:

- **Head deadline.** uvicorn times out a connection only while it idles *after* a
  response (keep-alive). A client that connects and sends nothing, or dribbles a request
  head a byte at a time, would hold its connection -- and a ``--max-connections`` slot --
  forever. Here a request head must be complete within ``head_timeout_s`` of the
  connection opening or of the previous response; otherwise the connection is closed
  (there is no request to answer). Bodies have their own deadline in the app
  (``limits.BodyDeadline``: 408). With httptools uvicorn's keep-alive timeout is kept the
  same way (``ClosingDeadline``: a deadline moved per request, not a timer made and
  cancelled per request).
- **Incomplete heads over ``max_header_bytes``.** A head that is complete reaches the app,
  whose limits answer 431 with the JSON error body. A head still incomplete beyond the
  limit must not be buffered further: h11 refuses it itself
  (``h11_max_incomplete_event_size``: uvicorn's plain 400, then close); httptools cannot be
  told to, so ``GuardedHttpToolsProtocol`` counts the bytes fed to its parser while a head
  is pending and answers 431 + close once they pass the limit.

A refusal of a broken or oversized *head* (uvicorn's 400 for bytes httptools cannot parse,
our 431) closes the connection -- but with httptools, requests pipelined before it on the
same connection may still be in their handlers: their answers go first, then the refusal
(``_refuse``), so a client never reads a 400 for a request the server went on to execute
(the fuzz test found a ``DELETE`` answered 400 and executed anyway). Nothing after the
refused bytes is read.

``httptools`` (C, llhttp) is the default parser: h11's pure-Python parsing and sending was
about a third of an append's event-loop time. ``--http-parser h11`` keeps the old one.

With httptools, a small plain append or create and a read or HEAD of a stream are served
from the parser's callbacks without uvicorn's request cycle and the ASGI layers
(``direct.py``, ``lean.py``):
``GuardedHttpToolsProtocol.on_headers_complete`` asks the gate's ``LeanPath`` (when
uvicorn runs the gate itself) whether the request is one, and gives it a ``DirectCycle``.
Once the parser returns, a lean request whose body is all there and that is likely answered
without waiting (``LeanPath.starts_eagerly``) starts at once, in a task only if it does wait
(``eager.start_eagerly``); the others (a body still to come, a long-poll, a write while others
wait for their group commit) get a task from the start, as uvicorn's requests do.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Callable
from functools import partial
from http import HTTPStatus
from typing import ClassVar, Literal, cast

import httptools
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from ..protocol.errors import HeadersTooLarge, ProtocolError
from .direct import DirectCycle
from .eager import start_eagerly
from .gate import Gate
from .lean import LeanPath
from .responses import error_response

HttpParser = Literal["httptools", "h11"]
_DIRECT_METHODS = frozenset({b"POST", b"PUT", b"GET", b"HEAD"})


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


_EARLY_S = 0.002
"""A timer may fire this much before its deadline and still count as on time: uvloop's clock
ticks in whole milliseconds, so its timers fire up to ~1 ms early, and scheduling again for
the rest spun the loop (hundreds of calls) until the tick."""


class ClosingDeadline:
    """A deadline of one connection that closes its transport when it passes: the head
    deadline (``arm`` when a head is awaited, ``stop`` once it has been parsed) and, with
    httptools, the keep-alive timeout (``arm`` after a response, ``stop`` when bytes come).

    Both are armed and stopped once or twice per request, so neither makes a timer each
    time (a ``call_later`` and its ``cancel`` cost ~2 µs here): ``arm`` notes the deadline,
    and the one timer scheduled lives on; when it fires before a deadline that moved on, it
    is scheduled again for that deadline, and when the deadline was stopped it does nothing.
    A connection has at most one timer per deadline, firing at most once per ``seconds``."""

    __slots__ = ("_deadline", "_handle", "_loop", "_seconds", "_transport")

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self._loop = loop
        self._seconds = seconds
        self._deadline: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._transport: asyncio.BaseTransport | None = None

    def arm(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._deadline = deadline = self._loop.time() + self._seconds
        if self._handle is None:
            self._handle = self._loop.call_at(deadline, self._late)

    @property
    def armed(self) -> bool:
        return self._deadline is not None

    def stop(self) -> None:
        self._deadline = None

    def cancel(self) -> None:
        """Stop, and let go of the timer (the connection is gone)."""
        self._deadline = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _late(self) -> None:
        self._handle = None
        deadline = self._deadline
        if deadline is None:
            return
        if deadline - self._loop.time() > _EARLY_S:  # (armed again since this timer was scheduled)
            self._handle = self._loop.call_at(deadline, self._late)
            return
        self._deadline = None
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()


class GuardedH11Protocol(H11Protocol):
    head_timeout_s: ClassVar[float] = 30.0
    _head_timer: ClosingDeadline
    _scope_before: object = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_timer = ClosingDeadline(self.loop, self.head_timeout_s)
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_timer.cancel()
        super().connection_lost(exc)

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
    max_head_bytes: ClassVar[int] = 0
    """0: no limit."""

    _head_timer: ClosingDeadline
    _keep_alive: ClosingDeadline
    _lean: LeanPath | None = None
    _head_pending = True
    """Between the end of a request (or the connection's start) and the next parsed head."""
    _head_seen = 0
    """Bytes fed to the parser while a head was pending (at most one read too few)."""
    _refusal: Callable[[], None] | None = None
    """A head's refusal waiting for the answers to the requests before it (``_refuse``)."""
    _starting: DirectCycle | None = None
    """A lean request parsed in this ``data_received``, to start when the parser returns."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_timer = ClosingDeadline(self.loop, self.head_timeout_s)
        self._keep_alive = ClosingDeadline(self.loop, self.timeout_keep_alive)
        super().connection_made(transport)
        self._head_timer.arm(transport)
        self._lean = _lean_path(self.app)

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_timer.cancel()
        super().connection_lost(exc)
        self._keep_alive.cancel()

    def _unset_keepalive_if_required(self) -> None:
        self._keep_alive.stop()  # (uvicorn's: cancels its timer; this one stays, see ClosingDeadline)

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            return  # (the parser stopped at the refused bytes)
        limit = self.max_head_bytes
        if limit and self._head_pending:
            self._head_seen += len(data)
        try:
            super().data_received(data)
            if limit and self._head_pending and self._head_seen > limit and not self.transport.is_closing():
                self._refuse(self._send_too_large)
        finally:  # (after the parser: a lean request's body, if it came with the head, is all there)
            starting = self._starting
            if starting is not None:
                self._starting = None
                self._start_lean(starting)

    def _start_lean(self, cycle: DirectCycle) -> None:
        """Start a lean request: at once if it is likely answered without waiting, else (its body
        still to come, a long-poll, a write behind others) in a task, as uvicorn starts requests."""
        if cycle.more_body or cycle.disconnected or not cycle.lean.starts_eagerly(cycle.scope):
            self._start_asgi_task(cast(RequestResponseCycle, cycle), self.app)
        else:
            start_eagerly(self.loop, cycle.run_asgi(self.app), self.tasks)

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
        self._head_pending = False
        self._head_timer.stop()
        if self._lean is None or not self._serve_directly(self._lean):
            super().on_headers_complete()

    def _serve_directly(self, lean: LeanPath) -> bool:
        """Give the request just parsed a ``DirectCycle`` if the lean path takes it (what
        ``super().on_headers_complete`` does, with that cycle); ``False``: it did not."""
        parser = self.parser
        method = parser.get_method()
        if method not in _DIRECT_METHODS or self.expect_100_continue or parser.get_http_version() != "1.1":
            return False
        limit = self.limit_concurrency
        if parser.should_upgrade() or (
            limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit)
        ):
            return False  # (uvicorn answers: the upgrade, or its 503)
        scope = self.scope
        parsed_url = httptools.parse_url(self.url)
        raw_path = parsed_url.path
        try:
            path = raw_path.decode("ascii")
        except UnicodeDecodeError:
            return False
        scope["method"] = method.decode("ascii")
        scope["path"] = self.root_path + (urllib.parse.unquote(path) if "%" in path else path)
        scope["raw_path"] = self.root_path.encode("ascii") + raw_path
        scope["query_string"] = parsed_url.query or b""
        name = lean.target(cast(dict[str, object], scope))
        if name is None:
            return False
        cycle = DirectCycle(
            cast(dict[str, object], scope),
            name,
            lean,
            self.transport,
            self.flow,
            self.server_state.default_headers,
            keep_alive=parser.should_keep_alive(),
            access_log=self.access_log,
            on_response=self.on_response_complete,
        )
        existing, self.cycle = self.cycle, cast(RequestResponseCycle, cycle)  # (the protocol's type for it)
        if existing is None or existing.response_complete:
            self._starting = cycle  # (started by data_received once the parser returns)
        else:  # pipelined behind a request still being answered
            self.flow.pause_reading()
            self.pipeline.appendleft((self.cycle, self.app))
        return True

    def on_message_complete(self) -> None:
        self._head_pending = True
        self._head_seen = 0
        super().on_message_complete()

    def on_response_complete(self) -> None:
        """uvicorn's, with the keep-alive timeout of ``ClosingDeadline`` instead of a new timer per
        response; and the head deadline, and a refusal waiting for this answer."""
        if self._head_pending and not self.pipeline:
            self._head_timer.arm(self.transport)  # no next head parsed yet: its deadline starts
        self.server_state.total_requests += 1
        if not self.transport.is_closing():
            self._keep_alive.stop()
            self.flow.resume_reading()
            if self.pipeline:
                cycle, app = self.pipeline.pop()
                self._start_asgi_task(cycle, app)
            else:
                self._keep_alive.arm(self.transport)
        refusal = self._refusal
        if refusal is not None and not self.pipeline and self.cycle.response_complete:
            self._head_timer.stop()
            if not self.transport.is_closing():
                refusal()


def _lean_path(app: object) -> LeanPath | None:
    """The gate's lean path when uvicorn runs the gate itself, or behind its proxy-headers
    middleware only (which leaves requests without forwarding headers as they are). Behind
    any other wrapper (a user's middleware, uvicorn's trace-level message logger) there is
    none: every request must pass through it."""
    if isinstance(app, ProxyHeadersMiddleware):
        app = app.app
    return app.lean if isinstance(app, Gate) else None


def guarded_protocol(
    parser: HttpParser, head_timeout_s: float, max_head_bytes: int
) -> type[GuardedH11Protocol] | type[GuardedHttpToolsProtocol]:
    """The protocol class to hand to uvicorn (which instantiates it per connection); for
    h11, pass ``max_head_bytes`` as uvicorn's ``h11_max_incomplete_event_size`` too."""
    if parser == "h11":

        class ConfiguredH11(GuardedH11Protocol):
            pass

        ConfiguredH11.head_timeout_s = head_timeout_s
        return ConfiguredH11

    class Configured(GuardedHttpToolsProtocol):
        pass

    Configured.head_timeout_s = head_timeout_s
    Configured.max_head_bytes = max_head_bytes
    return Configured
