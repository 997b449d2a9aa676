"""Which requests take the fast path, and their answer without the ASGI layers (``FastPath``).

Small appends are most of what a busy server does, then reads and long-polls of a stream,
then creates (many streams, each created once). Through the ASGI app such a request passes
uvicorn's request cycle and proxy-headers middleware, the gate, the base-route dispatch and
Starlette's ``Request``/``Response`` machinery. ``FastPath.target`` picks such a request when
its head has been parsed, and the protocol serves it in a ``FastCycle`` (``cycle.py``: the
connection's side) with ``FastPath.respond`` (this module: the answer), which gives the
request what the app would:

- the same request policy as the gate's (``request_policy.RequestPolicy``): admitted here
  (401/403, 431, 429), observed and decorated by the cycle (in flight; route ``base_stream``, or
  ``unrouted`` for a refusal; a long-poll's live-reader slot released at the end; the security
  headers); then the same handler (``StreamHandlers.read`` / ``head``; ``read_body`` with
  ``plain_append`` or ``create_stream``), protocol errors as the same JSON (``error_response``);
- which requests, all to a stream of the base surface (``DurableStreamsApp.stream_target``: not a
  sub-resource, not ``__ds``, a valid path, the app started): ``POST`` or ``PUT`` with one decimal
  ``Content-Length`` of at most ``FAST_MAX_BODY``, no ``Transfer-Encoding``, no bulk append header
  (``protocol.bulk``: large bodies, their own handler) -- conditional appends (``If-Match``,
  ``protocol.preconditions``) included: ``plain_append`` reads the header and the engine checks it in
  the append's one synchronous step on either path; ``GET`` or ``HEAD`` without a body, not SSE
  (a streamed response: its query string has no ``sse``) and not asking for a read plan.
  Everything else goes through the app;
- behind a proxy, the client and scheme the app would see: forwarding headers are read as
  uvicorn's proxy-headers middleware reads them, by that middleware (``forwarded.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Scope

from ...protocol import bulk
from ...protocol.errors import ProtocolError
from ..answers import Answer
from ..metrics import ROUTE_KEY, STREAM_ROUTE
from ..read_answers import ANSWER_AFTER_WAKE, Parking
from ..read_plans import wants_plan
from ..request_policy import RequestPolicy
from ..responses import error_response
from ..started import Started
from ..streams import append_flags
from ..time_lookup import wants_time_lookup
from .forwarded import FORWARDING, Forwarded

_WRITES = frozenset({"POST", "PUT"})
_READS = frozenset({"GET", "HEAD"})
FAST_MAX_BODY = 64 * 1024
"""Declared bodies up to this size (uvicorn's read buffer never pauses below it)."""
_NOT_FAST = frozenset({b"transfer-encoding", bulk.BULK_CONTENT_TYPE.lower().encode()})


class FastPathApp(Protocol):
    """What the fast path needs of the app (``DurableStreamsApp``)."""

    started: Started | None
    policy: RequestPolicy

    @property
    def asgi(self) -> ASGIApp:
        """The ASGI app whose requests the fast path serves in its place."""

    def stream_target(self, scope: Scope) -> str | None: ...


class FastPath:
    """Which requests of an app the fast path serves, and their answers (module docstring)."""

    def __init__(self, app: FastPathApp) -> None:
        self.app = app
        self.policy = app.policy
        self.served = 0
        """Requests served this way (tests check that the path is taken)."""
        self.writes_in_flight = 0
        """Appends and creates between their start and their answer (waiting for durability)."""

    def starts_eagerly(self, scope: Scope) -> bool:
        """Whether a request ``target`` chose is worth starting at once rather than in a task
        (``eager.py``), its body being all there: a read or HEAD that is not a long-poll (those
        park), or a write while no other write waits for its group commit (its checks and its
        record's hand-over to the WAL's sync thread run in the parser's turn, a task continues
        it from its wait for durability). Under a load of writes a task from the start costs
        less than a start at once continued by a task (one turn of the loop fewer)."""
        if scope["method"] in _WRITES:
            return self.writes_in_flight == 0
        return b"live=" not in scope["query_string"]

    def target(self, scope: Scope, forwarded: Forwarded | None = None) -> str | None:
        """The stream a request reads, appends to or creates on the fast path, or ``None``: the app
        serves it. ``forwarded``: the proxy-headers middleware uvicorn runs the app behind, if any,
        applied to the scope of a request taken that carries forwarding headers (``forwarded.py``)."""
        method = scope["method"]
        if method in _READS:
            proxied = _read_headers(scope)
        elif method in _WRITES:
            proxied = _write_headers(scope)
        else:
            return None
        if proxied is None:
            return None
        name = self.app.stream_target(scope)
        if proxied and name is not None and forwarded is not None:
            forwarded.apply(scope)
        return name

    async def respond(
        self, name: str, scope: Scope, body: bytes | AsyncIterator[bytes], parking: Parking = ANSWER_AFTER_WAKE
    ) -> Response | Answer:
        """The response to a request ``target`` chose. ``body``: the whole body when it had all
        arrived before the handler ran (most requests: checked against the same limit, with no
        deadline left to keep), else its chunks as they arrive (which raise ``ClientDisconnect``
        when the client goes). ``parking``: the connection's (``FastCycle``), which may answer a
        long-poll at its wake (``StreamHandlers.read``: the response returned is then written already)."""
        self.served += 1
        started = self.app.started
        assert started is not None  # (stream_target: the app has started)
        handlers = started.streams
        writing = False
        try:
            refusal = self.policy.admit(scope)
            if refusal is not None:
                return refusal  # (route label: unrouted, as the gate's refusals)
            scope[ROUTE_KEY] = STREAM_ROUTE
            method = scope["method"]
            if method == "GET":
                return await handlers.read(Request(scope), name, parking)
            if method == "HEAD":
                return await handlers.head(name)
            self.writes_in_flight += 1
            writing = True
            headers: dict[str, str] = {}  # (by lower-case name, the first of a repeated one: the handlers' lookups)
            for key, value in scope["headers"]:
                headers.setdefault(key.decode("latin-1"), value.decode("latin-1"))

            def read() -> Awaitable[bytes]:
                if isinstance(body, bytes):
                    return handlers.bodies.received(body, scope)
                return handlers.bodies.read(headers.get("content-length"), body, scope)

            if method == "PUT":
                status, answer = await handlers.create_stream(name, headers, scope, read)
            else:
                producer, close = append_flags(headers)  # (checked before the body is read, as the app does)
                status, answer = await handlers.plain_append(name, headers, await read(), producer, close)
        except ProtocolError as error:
            return error_response(error)
        finally:
            if writing:
                self.writes_in_flight -= 1
        return Answer(status, answer)


def _write_headers(scope: Scope) -> bool | None:
    """A small plain append or create: one decimal ``Content-Length`` up to ``FAST_MAX_BODY``, no
    ``Transfer-Encoding``, not a bulk append. ``None``: not one; else whether it carries forwarding headers."""
    declared = None
    proxied = False
    for name, value in scope["headers"]:
        if name == b"content-length":
            if declared is not None:
                return None
            declared = value
        elif name in _NOT_FAST:
            return None
        elif name in FORWARDING:
            proxied = True
    if declared is None or not declared.isdigit() or len(declared) > 7 or int(declared) > FAST_MAX_BODY:
        return None
    return proxied


def _read_headers(scope: Scope) -> bool | None:
    """A read or HEAD of a stream: no body, no SSE (a streamed response), no read plan. ``None``:
    not one; else whether it carries forwarding headers."""
    if b"sse" in scope["query_string"]:
        return None
    proxied = False
    for name, value in scope["headers"]:
        if name in _NOT_FAST or (name == b"content-length" and value != b"0"):
            return None
        if name == b"accept" and (wants_plan(value.decode("latin-1")) or wants_time_lookup(value.decode("latin-1"))):
            return None
        if name in FORWARDING:
            proxied = True
    return proxied
