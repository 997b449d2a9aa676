"""The fast path's connection protocol: uvicorn's httptools protocol, with the guards, serving
the requests ``FastPath`` takes from the parser's callbacks.

``FastPathProtocol.on_headers_complete`` asks the ``FastPath`` whether the request just parsed
is one it serves, and gives it a ``FastCycle`` in the place of uvicorn's request cycle (the
connection's ordering, body delivery and flow control stay uvicorn's). Once the parser
returns, a request whose body is all there and that is likely answered without waiting
(``FastPath.starts_eagerly``) starts at once, in a task only if it does wait
(``eager.start_eagerly``); the others (a body still to come, a long-poll, a write while others
wait for their group commit) get a task from the start, as uvicorn's requests do.

The fast path stands in for the app uvicorn runs only when uvicorn runs it alone or behind its
proxy-headers middleware, whose reading of forwarding headers it then applies (``forwarded.py``);
behind any other wrapper every request goes through that wrapper. uvicorn's keep-alive timeout
is kept by a ``ClosingDeadline`` (a deadline moved per request, not a timer made and cancelled
per request).
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Callable
from typing import ClassVar, Literal, cast

import httptools
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from .cycle import DefaultLines, FastCycle, peer_is_local
from .deadline import ClosingDeadline
from .eager import start_eagerly
from .forwarded import Forwarded
from .guards import GuardedH11Protocol, GuardedHttpToolsProtocol
from .route import FastPath, FastPathApp

HttpParser = Literal["httptools", "h11"]
_FAST_METHODS = frozenset({b"POST", b"PUT", b"GET", b"HEAD"})


def _as_uvicorn_cycle(cycle: FastCycle) -> RequestResponseCycle:
    """A ``FastCycle`` where uvicorn's protocol keeps its cycle: it has every attribute the
    protocol uses of one (tests/server/test_uvicorn_internals.py derives them from uvicorn's source)."""
    return cast(RequestResponseCycle, cycle)


class FastPathProtocol(GuardedHttpToolsProtocol):
    fast_path: ClassVar[FastPath | None] = None
    """The requests served on the fast path, when uvicorn runs the app it stands in for (``_bind``)."""
    default_lines: ClassVar[DefaultLines] = DefaultLines()
    """uvicorn's default headers rendered (one per server: ``connection_protocol`` gives each its own)."""
    _keep_alive: ClosingDeadline
    _bound: ClassVar[tuple[object, FastPath | None, Forwarded | None] | None] = None
    """The loaded app this class last bound to, and what the fast path is for it (``_bind``)."""
    _fast: FastPath | None = None
    _forwarded: Forwarded | None = None
    _starting: FastCycle | None = None
    """A request the fast path took in this ``data_received``, to start when the parser returns."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._keep_alive = ClosingDeadline(self.loop, self.timeout_keep_alive)
        super().connection_made(transport)
        bound = self._bound
        if bound is None or bound[0] is not self.app:
            bound = (self.app, *_bind(self.app, self.fast_path))
            type(self)._bound = bound
        _, self._fast, self._forwarded = bound

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._keep_alive.cancel()

    def _unset_keepalive_if_required(self) -> None:
        self._keep_alive.stop()  # (uvicorn's: cancels its timer; this one stays, see ClosingDeadline)

    def data_received(self, data: bytes) -> None:
        try:
            super().data_received(data)
        finally:  # (after the parser: a fast request's body, if it came with the head, is all there)
            starting = self._starting
            if starting is not None:
                self._starting = None
                self._start(starting)

    def _start(self, cycle: FastCycle) -> None:
        """Start a fast request: at once if it is likely answered without waiting, else (its body
        still to come, a long-poll, a write behind others) in a task, as uvicorn starts requests."""
        if cycle.more_body or cycle.disconnected or not cycle.fast_path.starts_eagerly(cycle.scope):
            self._start_asgi_task(_as_uvicorn_cycle(cycle), self.app)
        else:
            start_eagerly(self.loop, cycle.run_asgi(self.app), self.tasks)

    def on_headers_complete(self) -> None:
        fast = self._fast
        if fast is not None and self._serve(fast):
            self._head_parsed()
        else:
            super().on_headers_complete()

    def _serve(self, fast: FastPath) -> bool:
        """Give the request just parsed a ``FastCycle`` if the fast path takes it (what
        ``super().on_headers_complete`` does, with that cycle); ``False``: it did not."""
        parser = self.parser
        method = parser.get_method()
        if method not in _FAST_METHODS or self.expect_100_continue or parser.get_http_version() != "1.1":
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
        name = fast.target(cast(dict[str, object], scope), self._forwarded)
        if name is None:
            return False
        cycle = FastCycle(
            cast(dict[str, object], scope),
            name,
            fast,
            peer_is_local(self.client, self.server),  # (the connection's peer, whatever a proxy forwarded)
            self.transport,
            self.flow,
            self.server_state.default_headers,
            self.default_lines,
            keep_alive=parser.should_keep_alive(),
            access_log=self.access_log,
            on_response=self.on_response_complete,
        )
        existing, self.cycle = self.cycle, _as_uvicorn_cycle(cycle)
        if existing is None or existing.response_complete:
            self._starting = cycle  # (started by data_received once the parser returns)
        else:  # pipelined behind a request still being answered
            self.flow.pause_reading()
            self.pipeline.appendleft((self.cycle, self.app))
        return True

    def _next_request(self) -> None:
        """uvicorn's, with the keep-alive timeout of ``ClosingDeadline`` instead of a new timer per response."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._keep_alive.stop()
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        else:
            self._keep_alive.arm(self.transport)


def _bind(app: object, fast: FastPath | None) -> tuple[FastPath | None, Forwarded | None]:
    """``fast`` when uvicorn runs the app it stands in for itself, or behind its proxy-headers
    middleware only (whose reading of forwarding headers the fast path then applies:
    ``forwarded.py``). Behind any other wrapper (a user's middleware, uvicorn's trace-level message
    logger) there is none: every request must pass through it."""
    if fast is None:
        return None, None
    forwarded = None
    if isinstance(app, ProxyHeadersMiddleware):
        forwarded = Forwarded(app)
        app = app.app
    return (fast, forwarded) if app is fast.app.asgi else (None, None)


def connection_protocol(
    parser: HttpParser,
    head_timeout_s: float,
    max_head_bytes: int,
    app: FastPathApp | None,
    before_shutdown: tuple[Callable[[], None], ...] = (),
) -> type[GuardedH11Protocol] | type[GuardedHttpToolsProtocol]:
    """The protocol class to hand to uvicorn (which instantiates it per connection); for
    h11, pass ``max_head_bytes`` as uvicorn's ``h11_max_incomplete_event_size`` too. ``app``:
    the app whose stream requests the fast path serves (httptools only); ``None``: none.
    ``before_shutdown``: called when the server begins to stop (``guards``)."""
    if parser == "h11":

        class ConfiguredH11(GuardedH11Protocol):
            pass

        ConfiguredH11.head_timeout_s = head_timeout_s
        ConfiguredH11.before_shutdown = before_shutdown
        return ConfiguredH11

    if app is None:

        class Guarded(GuardedHttpToolsProtocol):
            pass

        Guarded.head_timeout_s = head_timeout_s
        Guarded.max_head_bytes = max_head_bytes
        Guarded.before_shutdown = before_shutdown
        return Guarded

    class Configured(FastPathProtocol):
        pass

    Configured.before_shutdown = before_shutdown
    Configured.head_timeout_s = head_timeout_s
    Configured.max_head_bytes = max_head_bytes
    Configured.default_lines = DefaultLines()
    Configured.fast_path = FastPath(app)
    return Configured
