"""A fast-path request and its response on the connection: ``FastCycle``, in the place of uvicorn's cycle.

uvicorn gives every request a ``RequestResponseCycle``: an ``asyncio.Event``, a task running
the app with ``receive``/``send``, an ASGI message per body chunk and per response part,
header validation and rendering in ``send`` (two socket writes: head, then body). For the
requests ``FastPath`` takes that is most of what the server does per request beyond the work
itself. ``FastPathProtocol.on_headers_complete`` (``protocol.py``) makes a ``FastCycle``
instead, so uvicorn's own connection handling still applies to it unchanged:

- **ordering**: it is queued in the connection's ``pipeline`` behind a request still being
  answered and started by uvicorn's ``_start_asgi_task`` (a task running ``run_asgi``);
- **the body**: uvicorn's ``on_body`` / ``on_message_complete`` append to ``body``, clear
  ``more_body`` and ``set`` ``message_event``; a body all there when the request starts (the
  usual case: it came with the head) is handed over whole, else ``chunks`` yields it as it
  comes, and over its high-water mark reading pauses until ``chunks`` asks for more (as
  ``receive`` does); ``connection_lost`` sets ``disconnected``;
- **the response**: one ``transport.write`` of status line, uvicorn's default headers
  (``date``, ``server``), the handler's headers, the security headers and the body (none
  for HEAD), after waiting for a paused transport to drain; ``connection: close`` and the close when the
  request or a response header says so (or the server is shutting down: ``keep_alive``);
  then ``on_response`` lets the protocol start the next pipelined request or arm its
  timers; uvicorn's access log line when it is on;
- **failures**: an exception from the handler is logged as uvicorn logs one and answered
  with its 500 (and close); a client gone mid-request gets nothing.

**A woken reader runs first.** A long-poll answered at its wake (``answer_now``) is written
from the group commit's completion with more work right behind it: the writer's own answer,
other readers, bookkeeping. A socket's write wakes its reader as a *synchronous* wake-up (the
kernel expects the writer to sleep soon), so a reader on this machine is put on this core and
waits behind that work (bench/README.md measures the one-reader wake). ``answer_now`` yields
the core after writing (``os.sched_yield``) when the reader is on this machine (its address is
the server's: ``peer_is_local``): the reader runs now; with nothing else runnable the call
returns at once. If a busy thread shares the core (a compaction's), the loop resumes after that
thread's turn: the price of this choice. Only at wakes: a request's own answer ends its work
(the loop then sleeps or serves the next one).

What a request gets is the app's answer, to the byte (tests/server/test_lean_appends.py): the
gate's request policy (``request_policy.RequestPolicy``) admits it in ``FastPath.respond``, which
runs the same handlers; the cycle observes it (``begin`` / ``end``) and decorates its answer
(``security_lines``) as the gate does.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable, Sequence

from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Scope
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

from ..answers import Answer
from ..read_answers import ParkedLongPoll
from ..request_policy import security_lines
from ..responses import UNSAFE_VALUE, PartsResponse, head_lines
from .parked import ParkedRead
from .route import FastPath

_JOINED_BODY = 16 * 1024
"""Bodies up to this size go out in one write with the head; larger ones in a write of their own."""
_ERROR_LOG = logging.getLogger("uvicorn.error")
_ACCESS_LOG = logging.getLogger("uvicorn.access")
_SERVER_ERROR = (
    STATUS_LINE[500] + b"content-type: text/plain; charset=utf-8\r\ncontent-length: 21\r\nconnection: close\r\n\r\n"
    b"Internal Server Error"
)


_NO_HEADERS: list[tuple[bytes, bytes]] = []
_yield_cpu: Callable[[], None] = getattr(os, "sched_yield", lambda: None)
"""Lets a reader just woken on this core run first (module docstring); not on every platform."""


class DefaultLines:
    """uvicorn's default headers of one server (``date``, ``server``, and any an embedder
    configured) as lines of a response head. uvicorn renews its list once a second (the date);
    it is rendered once per list, not per response."""

    __slots__ = ("_headers", "_lines")

    def __init__(self) -> None:
        self._headers: object = None
        self._lines: bytes | None = b""

    def render(self, default_headers: list[tuple[bytes, bytes]]) -> bytes | None:
        """The lines of ``default_headers``; ``None``: the list holds a ``connection`` header or a
        value uvicorn would refuse, which each response then handles as its own headers."""
        if self._headers is not default_headers:
            plain = all(name != b"connection" and not UNSAFE_VALUE.search(value) for name, value in default_headers)
            self._lines = b"".join(b"%s: %s\r\n" % pair for pair in default_headers) if plain else None
            self._headers = default_headers
        return self._lines


def peer_is_local(client: tuple[str, int] | None, server: tuple[str, int | None] | None) -> bool:
    """Whether a connection's peer (``client``) is on this machine: its address is the server's
    own (TCP between two processes here uses the same address at both ends), or there is no
    address (a Unix socket)."""
    return client is None or server is None or client[0] == server[0]


class _Wakeup:
    """The cycle's ``message_event``: ``set`` by the protocol when body arrives or the
    connection is lost; waited on only while a body is incomplete (a future, made then)."""

    __slots__ = ("_waiter",)

    def __init__(self) -> None:
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


class FastCycle:
    """One fast-path request and its response, in the place of uvicorn's ``RequestResponseCycle``
    (the attributes the protocol reads and writes have its names)."""

    __slots__ = (
        "access_log",
        "body",
        "default_headers",
        "default_lines",
        "disconnected",
        "fast_path",
        "flow",
        "keep_alive",
        "local_peer",
        "message_event",
        "more_body",
        "name",
        "on_response",
        "response_complete",
        "scope",
        "transport",
    )

    def __init__(
        self,
        scope: Scope,
        name: str,
        fast_path: FastPath,
        local_peer: bool,
        transport: asyncio.Transport,
        flow: FlowControl,
        default_headers: list[tuple[bytes, bytes]],
        default_lines: DefaultLines,
        keep_alive: bool,
        access_log: bool,
        on_response: Callable[[], None],
    ) -> None:
        self.scope = scope
        self.name = name
        self.fast_path = fast_path
        self.local_peer = local_peer
        """Whether the connection's peer is on this machine (``peer_is_local``)."""
        self.transport = transport
        self.flow = flow
        self.default_headers = default_headers
        self.default_lines = default_lines
        self.keep_alive = keep_alive
        self.access_log = access_log
        self.on_response = on_response
        self.body = b""
        self.more_body = True
        self.disconnected = False
        self.response_complete = False
        self.message_event = _Wakeup()

    async def run_asgi(self, _app: object) -> None:
        """The request, start to end (the name under which uvicorn starts a cycle)."""
        policy = self.fast_path.policy
        started = policy.begin()
        status = 500  # unless the handler answers (observed as the gate does, whether or not the client stayed)
        try:
            body: bytes | AsyncIterator[bytes]
            if not self.more_body and not self.disconnected:  # all there (usually: it came with the head)
                body, self.body = self.body, b""
            else:
                body = self._chunks()
            response = await self.fast_path.respond(self.name, self.scope, body, self)
            status = response.status_code
            if not self.response_complete:  # (unless ``answer_now`` wrote it)
                if self.flow.write_paused and not self.disconnected:
                    await self.flow.drain()
                if not self.disconnected:
                    if isinstance(response, Answer):
                        self._write_answer(response)
                    else:
                        self._write(response)
        except ClientDisconnect:
            pass  # nobody to answer
        except Exception as error:
            status = 500
            if not self.disconnected:
                _ERROR_LOG.error("Exception in ASGI application\n", exc_info=error)
                if not self.response_complete:
                    self.response_complete = True
                    self.transport.write(_SERVER_ERROR)
                    self.transport.close()
        finally:
            policy.end(self.scope, status, started)

    async def _chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (``receive``'s part): usually all there at the first call."""
        while True:
            if self.disconnected:
                raise ClientDisconnect()
            if self.body or not self.more_body:
                chunk, self.body = self.body, b""
                yield chunk
                if not self.more_body and not self.body:
                    return
                continue
            self.flow.resume_reading()
            await self.message_event.wait()

    def at_wake(self, parked: ParkedLongPoll) -> Callable[[], bool]:
        """The request's ``Parking`` (``read_answers``): a parked long-poll is answered at its wake
        by ``ParkedRead.answer``, written by ``answer_now``."""
        return ParkedRead(parked, self.answer_now).answer

    def answer_now(self, status: int, lines: bytes, body: bytes) -> bool:
        """Write an answer from outside the request's task (a long-poll answered at its wake:
        ``parked.ParkedRead``) if the connection takes it at once; the task then ends
        without writing. ``lines``: its own header lines (``responses.head_lines``: none of the
        security headers, no ``connection``). ``False``: it does not (the client is gone, the
        transport's writes are paused, already answered, or uvicorn's default headers need
        rendering with each answer)."""
        defaults = self.default_lines.render(self.default_headers)
        if self.disconnected or self.response_complete or self.flow.write_paused or defaults is None:
            return False
        self._send(status, defaults + lines + security_lines(_NO_HEADERS), body)
        if self.local_peer:
            _yield_cpu()  # (the reader first: see the module docstring)
        return True

    def _write(self, response: Response) -> None:
        raw = response.raw_headers
        defaults = self.default_lines.render(self.default_headers)
        head: list[bytes] = []
        if defaults is None:
            headers = [*self.default_headers, *raw]
        else:
            headers = raw
            head.append(defaults)
        for name, value in headers:
            if UNSAFE_VALUE.search(value):
                raise RuntimeError("Invalid HTTP header value.")
            if name == b"connection" and b"close" in value.lower():
                self.keep_alive = False
                continue  # (written once, by _send)
            head += (name, b": ", value, b"\r\n")
        head.append(security_lines(raw))
        body = response.parts if isinstance(response, PartsResponse) else response.body
        self._send(response.status_code, b"".join(head), body)

    def _write_answer(self, answer: Answer) -> None:
        """A handler's ``Answer``: its head rendered from its headers as ``_write`` renders its
        ``Response`` (names lower-cased, latin-1, in order, ``content-length`` last), or through that
        ``Response`` when a value is one uvicorn refuses (its error) or uvicorn's default headers need
        rendering with it."""
        lines = head_lines(answer.headers)
        defaults = self.default_lines.render(self.default_headers)
        if lines is None or defaults is None:
            self._write(answer.response())
            return
        head = defaults + lines + answer.length_line() + security_lines(_NO_HEADERS)
        self._send(answer.status_code, head, answer.body)

    def _send(self, status: int, lines: bytes, body: bytes | memoryview | Sequence[bytes | memoryview]) -> None:
        """Status line, header ``lines``, the connection's own line, then ``body`` (none for HEAD):
        one buffer, or parts written end to end in one vectored write (``PartsResponse``)."""
        if self.scope["method"] == "HEAD":
            body = b""
        if self.access_log:
            scope = self.scope
            _ACCESS_LOG.info(
                '%s - "%s %s HTTP/%s" %d',
                get_client_addr(scope),  # type: ignore[arg-type]
                scope["method"],
                get_path_with_query_string(scope),  # type: ignore[arg-type]
                scope["http_version"],
                status,
            )
        end = b"\r\n" if self.keep_alive else b"connection: close\r\n\r\n"
        if not isinstance(body, bytes | memoryview):
            self.transport.writelines([b"".join((STATUS_LINE[status], lines, end)), *body])
        elif len(body) <= _JOINED_BODY:
            self.transport.write(b"".join((STATUS_LINE[status], lines, end, body)))
        else:  # (not copied into one buffer with the head; a read's body may be a memoryview)
            self.transport.write(b"".join((STATUS_LINE[status], lines, end)))
            self.transport.write(body)
        self.response_complete = True
        if not self.keep_alive:
            self.transport.close()
        self.on_response()
