"""Relaying one request to a shard's server, for what a redirect cannot carry.

A 307 lets the client repeat its request at the shard's server, so the bytes pass through
one process. Not every client can follow one, so the router redirects only where it works:

* reads and other requests without a body (``GET``, ``HEAD``, ``DELETE``) without
  credentials: every HTTP client follows those;
* every request of a client that says it follows redirects itself, with its credentials
  and body (``FOLLOWS_HEADER: follow``; this project's Python client sends it).

A client that must stay on the node it asked says ``FOLLOWS_HEADER: relay`` (the status page:
a page's requests all go to its own origin). Everything else is relayed too: the same method,
headers (the client's ``Host`` included) and body, streamed both ways (long-polls and SSE
too), on pooled keep-alive connections (``upstream``). A relay has deadlines:
``CONNECT_TIMEOUT_S`` to reach the shard's server, and ``read_timeout_s`` between two pieces
of its answer (longer than a long-poll's wait and an SSE connection's life, the longest
silences a healthy server keeps). A live read (long-poll, SSE) whose client goes away is
ended at the shard's server too.

What a failed relay answers depends on whether the request reached the shard's server
(``RelayFailure``): one that was never sent (no connection) is a plain "later" (503 with
``Retry-After``: every client asks again, and a plain append is safe to resend), while one
whose answer was lost after it was sent may have been stored (502 ``RELAY_IN_DOUBT``, no
``Retry-After``): an idempotent producer or a ``Stream-Seq`` append asks again safely, a plain
append must not be resent blindly, as after any lost answer.
Measured reasons: ``fetch`` (the official clients, browsers) drops ``Authorization`` on a
redirect to another origin (the shard's server then answers 401), and Node 20's fetch fails
to repeat a typed-array body after a 307 (``Cannot perform ArrayBuffer.prototype.slice on a
detached ArrayBuffer``). The reserved ``__ds`` namespace (subscriptions) is always relayed:
its answers carry absolute URLs (``jwks_url``) built from the ``Host`` the client used,
which must be the node it asked.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from starlette.types import Receive, Scope, Send

from .upstream import IDLE_S, PIECE, Connection, Head, Origin, Pool, body_pieces, read_head, split_target

HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailers"}
    | {b"transfer-encoding", b"upgrade"}
)
"""Headers of one connection, not of the message (RFC 9110 7.6.1)."""


FOLLOWS_HEADER = "durable-streams-redirects"
_FOLLOWS = FOLLOWS_HEADER.encode()
_BODYLESS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})
log = logging.getLogger("durable_streams_server.cluster")


def must_relay(scope: Scope, reserved: bool) -> bool:
    """Whether a request is relayed rather than redirected (module docstring)."""
    if reserved:
        return True
    headers = scope["headers"]
    asked = next((value.strip().lower() for name, value in headers if name == _FOLLOWS), None)
    if asked == b"relay":
        return True
    if asked == b"follow":
        return False
    return scope["method"] not in _BODYLESS or any(name == b"authorization" for name, _ in headers)


CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 120.0
"""The silence allowed between two pieces of a relayed answer when none is given: twice the
server's default SSE connection life (60 s), the longest silence a healthy shard server keeps
(``relay_read_timeout_s``)."""


def relay_read_timeout_s(long_poll_timeout_ms: int, sse_reconnect_ms: int) -> float:
    """Twice the longest a healthy shard server stays silent on a request: a long-poll's wait,
    or an SSE connection's life (the node's shard servers run with the node's own settings)."""
    return 2 * max(long_poll_timeout_ms, sse_reconnect_ms) / 1000


def relay_idle_s(keep_alive_timeout_s: float) -> float:
    """How long a pooled connection to a shard server may stay idle and be used again: half the
    shard servers' keep-alive timeout (they run with the node's own settings), so the relay
    never writes on a connection its server is closing."""
    return keep_alive_timeout_s / 2


@dataclass(frozen=True)
class RelayFailure:
    """Why a relay gave no answer: ``sent`` says whether the request may have reached the shard's server."""

    sent: bool
    error: str


class Relay:
    """Relays requests to shard servers over pooled keep-alive connections (``upstream``): the
    request's head rebuilt from the ASGI scope, its body and the answer passed through as they
    come."""

    def __init__(self, read_timeout_s: float = READ_TIMEOUT_S, idle_s: float = IDLE_S) -> None:
        self.read_timeout_s = read_timeout_s
        self.pool = Pool(CONNECT_TIMEOUT_S, idle_s)

    async def close(self) -> None:
        self.pool.close()

    async def relay(self, scope: Scope, receive: Receive, send: Send, target: str) -> RelayFailure | None:
        """Relay the request to ``target`` (an absolute URL) and stream its answer back;
        a ``RelayFailure`` if no answer came (nothing was sent back: the caller answers)."""
        origin, path = split_target(target)
        head, framing = _request_head(scope, path, origin)
        body, more = b"", False
        if framing is not None:
            message = await receive()
            if message["type"] == "http.disconnect":
                return RelayFailure(sent=False, error=_GONE)
            body, more = message.get("body", b""), message.get("more_body", False)
        try:
            connection = await self.pool.take(origin)
        except TimeoutError:
            return RelayFailure(sent=False, error=f"ConnectTimeout: no connection within {CONNECT_TIMEOUT_S:g} s")
        except OSError as exc:
            return RelayFailure(sent=False, error=f"ConnectError: {exc}")
        done = False
        live = framing is None and b"live=" in scope.get("query_string", b"")
        watcher = asyncio.create_task(_until_gone(receive, connection)) if live else None
        try:
            answer = await self._request(connection, scope, receive, head + _framed(body, more, framing), more, framing)
            if isinstance(answer, RelayFailure):
                return answer
            pairs = [(name, value) for name, value in answer.headers if name not in _NOT_PASSED_BACK]
            await send({"type": "http.response.start", "status": answer.status, "headers": pairs})
            broke_off = await self._answer_body(connection, answer, send)
            if broke_off is not None and (watcher is None or not watcher.done()):
                log.warning("relay: the shard server's answer broke off", extra={"error": broke_off})
            done = broke_off is None
        finally:
            if watcher is not None:
                watcher.cancel()
            if not done:
                connection.abort()
        if answer.keep_alive:
            self.pool.give_back(origin, connection)
        else:
            connection.abort()
        return None

    async def _request(
        self, connection: Connection, scope: Scope, receive: Receive, first: bytes, more: bool, framing: bytes | None
    ) -> Head | RelayFailure:
        """Send the request (``first``: its head and the body's first piece) and read its answer's head."""
        writer = connection.writer
        try:
            writer.write(first)
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return RelayFailure(sent=False, error=_GONE)  # (the shard's server has a part, which it drops)
                more = message.get("more_body", False)
                writer.write(_framed(message.get("body", b""), more, framing))
                try:
                    async with asyncio.timeout(self.read_timeout_s):
                        await writer.drain()
                except TimeoutError:
                    return RelayFailure(
                        sent=True, error=f"WriteTimeout: the server took nothing for {self.read_timeout_s:g} s"
                    )
            async with asyncio.timeout(self.read_timeout_s):
                return await read_head(connection.reader, scope["method"] == "HEAD")
        except TimeoutError:
            return RelayFailure(sent=True, error=f"ReadTimeout: no answer within {self.read_timeout_s:g} s")
        except (OSError, EOFError, ValueError, asyncio.LimitOverrunError) as exc:
            return RelayFailure(sent=True, error=f"{type(exc).__name__}: {exc}")

    async def _answer_body(self, connection: Connection, answer: Head, send: Send) -> str | None:
        """Pass the answer's body on as it comes; why it broke off if it did (the client's
        connection is then closed with its answer incomplete, as the shard server's was)."""
        try:
            if answer.length == 0:
                await send({"type": "http.response.body", "body": b""})
                return None
            if answer.length is not None and answer.length <= PIECE:  # (one piece: most answers)
                try:
                    async with asyncio.timeout(self.read_timeout_s):
                        body = await connection.reader.readexactly(answer.length)
                except asyncio.IncompleteReadError as exc:
                    await send({"type": "http.response.body", "body": exc.partial, "more_body": True})
                    raise
                await send({"type": "http.response.body", "body": body})
                return None
            pieces = body_pieces(connection.reader, answer)
            while True:
                async with asyncio.timeout(self.read_timeout_s):
                    piece = await anext(pieces, None)
                if piece is None:
                    break
                await send({"type": "http.response.body", "body": piece, "more_body": True})
        except (TimeoutError, OSError, EOFError, ValueError, asyncio.LimitOverrunError) as exc:
            return f"{type(exc).__name__}: {exc}"
        await send({"type": "http.response.body", "body": b""})
        return None


async def _until_gone(receive: Receive, connection: Connection) -> None:
    """Close the shard server's connection once the client's is gone: a live read (long-poll,
    SSE) would otherwise hold both until its own end, for nobody."""
    while (await receive())["type"] != "http.disconnect":
        pass
    connection.abort()


_GONE = "the client went away before the end of its request"
_NOT_PASSED_BACK = HOP_BY_HOP | {b"date", b"server"}
"""The node's own server adds ``Date`` and ``Server`` to every answer (once each, as HTTP wants)."""
_BODYLESS_RELAYED = (b"GET", b"HEAD", b"OPTIONS")
_NOT_FORWARDED = HOP_BY_HOP | {b"expect", b"content-length"}
"""``Expect: 100-continue`` was the node's to answer (it did: uvicorn); ``Content-Length`` is set by the framing."""


def _request_head(scope: Scope, path: str, origin: Origin) -> tuple[bytes, bytes | None]:
    """The request's head for the shard server (the client's headers but the hop-by-hop ones,
    its ``Host`` kept), and its body's framing: ``b"length"``, ``b"chunked"`` or ``None`` (none)."""
    method: str = scope["method"]
    parts = [method.encode("latin-1"), b" ", path.encode("latin-1"), b" HTTP/1.1\r\n"]
    length: bytes | None = None
    chunked = host = False
    for name, value in scope["headers"]:
        if name in _NOT_FORWARDED:
            if name == b"content-length":
                length = value
            elif name == b"transfer-encoding":
                chunked = chunked or value.lower().endswith(b"chunked")
            continue
        host = host or name == b"host"
        parts += (name, b": ", value, b"\r\n")
    if not host:
        parts.append(f"host: {origin.host}:{origin.port}\r\n".encode("latin-1"))
    framing: bytes | None = None
    if method.encode() not in _BODYLESS_RELAYED:
        if chunked:
            parts.append(b"transfer-encoding: chunked\r\n")
            framing = b"chunked"
        elif length is not None:
            parts += (b"content-length: ", length, b"\r\n")
            framing = b"length"
    parts.append(b"\r\n")
    return b"".join(parts), framing


def _framed(body: bytes, more: bool, framing: bytes | None) -> bytes:
    if framing != b"chunked":
        return body
    chunk = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
    return chunk if more else chunk + b"0\r\n\r\n"
