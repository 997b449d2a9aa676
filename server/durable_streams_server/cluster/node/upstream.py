"""HTTP/1.1 to the node's shard servers at the byte level, on pooled keep-alive connections.

The relay (``proxy``) passes a request through and its answer back; it needs to know only
where each message ends, so this module parses no more than that: the answer's status line
and headers, and its framing (``Content-Length``, chunked, or until the connection closes).
Why not a general client: ``httpx`` cost the router 2-4.5 ms of CPU per relayed append under
32 connections (``bench/relay_bench.py``), and cProfile (``--profile``) shows where: about half
in ``httpcore``'s pool handing requests to connections (every waiting request checks every
connection, each a socket poll), a quarter in a failed ``import sniffio`` on every lock it
creates (a search of ``sys.path`` each time), the rest in its request, response and stream
objects. With this module the router spends about 0.1 ms per relayed append, most of it in
the two socket writes (to the shard server, and uvicorn's to the client).

A pooled connection is used again only when it is provably fresh: idle for less than the
pool's ``idle_s`` (half the shard servers' ``--keep-alive-timeout-s``, after which they close
an idle connection: ``proxy.relay_idle_s``) and with no end of stream, error or unexpected
byte from the server meanwhile. A connection that the server closes while the relay's request
is on its way is not retried: the server may have read the request (``proxy.RelayFailure``).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

IDLE_S = 2.0
"""How long a connection may stay idle and be used again, when not given (a shard server's
default keep-alive timeout is 5 s)."""
MAX_IDLE = 64
"""Idle connections kept per shard server; more are closed when given back."""
HEAD_LIMIT = 256 * 1024
"""The longest answer head read (a shard server's heads are a few hundred bytes)."""
PIECE = 256 * 1024
"""The most of a long body read (and passed on) at once."""


@dataclass(frozen=True)
class Origin:
    """Where a shard server listens (``scheme://host:port``)."""

    scheme: str
    host: str
    port: int


def split_target(target: str) -> tuple[Origin, str]:
    """An absolute URL's origin and its request target (path and query)."""
    cut = target.find("/", target.find("//") + 2)
    if cut < 0:
        return _origin(target), "/"
    return _origin(target[:cut]), target[cut:]


@functools.lru_cache(maxsize=256)
def _origin(url: str) -> Origin:
    """(cached: a node relays to a handful of shard servers)"""
    parts = urlsplit(url)
    secure = parts.scheme == "https"
    return Origin(parts.scheme, parts.hostname or "", parts.port or (443 if secure else 80))


class Connection:
    """One connection to a shard server, and when it was last given back idle."""

    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def fresh(self, now: float, idle_s: float) -> bool:
        """Whether a request may go on this idle connection: recent, and nothing came from the
        server since its last answer (an end of stream, an error or a stray byte)."""
        reader = self.reader
        if now - self.idle_since >= idle_s or self.writer.transport.is_closing():
            return False
        return not reader.at_eof() and reader.exception() is None and not getattr(reader, "_buffer", b"")

    def abort(self) -> None:
        self.writer.transport.abort()


class Pool:
    """Idle keep-alive connections per shard server, the most recently used taken first."""

    def __init__(self, connect_timeout_s: float, idle_s: float = IDLE_S) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.idle_s = idle_s
        self._idle: dict[Origin, list[Connection]] = {}
        self._swept = time.monotonic()
        self._tls: ssl.SSLContext | None = None

    async def take(self, origin: Origin) -> Connection:
        """A fresh idle connection to ``origin`` or a new one (``OSError`` or ``TimeoutError``
        when none could be made: nothing was sent)."""
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if connection.fresh(now, self.idle_s):
                return connection
            connection.abort()
            if now - connection.idle_since >= self.idle_s:  # (the older ones below it too)
                for older in idle:
                    older.abort()
                idle.clear()
        secure = origin.scheme == "https"
        if secure and self._tls is None:
            self._tls = ssl.create_default_context()
        async with asyncio.timeout(self.connect_timeout_s):
            reader, writer = await asyncio.open_connection(
                origin.host, origin.port, ssl=self._tls if secure else None, limit=HEAD_LIMIT
            )
        return Connection(reader, writer)

    def give_back(self, origin: Origin, connection: Connection) -> None:
        now = time.monotonic()
        if now - self._swept >= self.idle_s:
            self._sweep(now)
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= MAX_IDLE:
            connection.abort()
            return
        connection.idle_since = now
        idle.append(connection)

    def _sweep(self, now: float) -> None:
        """Close the idle connections too old to use, of every shard server: a shard's server
        that moved or restarted listens elsewhere, and nothing takes its connections again."""
        self._swept = now
        for origin, idle in list(self._idle.items()):
            kept = [connection for connection in idle if connection.fresh(now, self.idle_s)]
            for connection in idle:
                if connection not in kept:
                    connection.abort()
            if kept:
                self._idle[origin] = kept
            else:
                del self._idle[origin]

    def close(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.abort()
        self._idle.clear()


@dataclass(frozen=True)
class Head:
    """An answer's status and headers (lower-case names), and how its body is framed."""

    status: int
    headers: list[tuple[bytes, bytes]]
    length: int | None
    """``Content-Length``; ``None`` for chunked or until-close bodies."""
    chunked: bool
    keep_alive: bool
    """Whether the connection may carry another request once this answer's body is read."""


class BadAnswer(ValueError):
    """The shard server's answer is not HTTP/1.1 this module can frame."""


async def read_head(reader: asyncio.StreamReader, bodyless: bool) -> Head:
    """The next final answer's head (interim 1xx answers skipped); ``bodyless`` for the answer
    to a ``HEAD`` request. Raises ``asyncio.IncompleteReadError`` at an end of stream."""
    while True:
        raw = await reader.readuntil(b"\r\n\r\n")
        lines = raw[:-4].split(b"\r\n")
        status_line = lines[0]
        if not status_line.startswith(b"HTTP/1.") or len(status_line) < 12 or not status_line[9:12].isdigit():
            raise BadAnswer(f"not an HTTP/1.1 status line: {status_line[:80]!r}")
        status = int(status_line[9:12])
        if 100 <= status < 200 and status != 101:
            continue
        headers = []
        length: int | None = None
        chunked = False
        keep_alive = status_line.startswith(b"HTTP/1.1")
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                raise BadAnswer(f"not a header line: {line[:80]!r}")
            name, value = name.strip().lower(), value.strip()
            if name == b"content-length":
                if not value.isdigit():
                    raise BadAnswer(f"Content-Length {value[:40]!r}")
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = value.lower().endswith(b"chunked")
            elif name == b"connection" and b"close" in value.lower():
                keep_alive = False
            headers.append((name, value))
        if bodyless or status in (101, 204, 304):
            return Head(status, headers, 0, False, keep_alive and status != 101)
        if chunked:
            return Head(status, headers, None, True, keep_alive)
        if length is None:
            return Head(status, headers, None, False, False)
        return Head(status, headers, length, False, keep_alive)


async def body_pieces(reader: asyncio.StreamReader, head: Head) -> AsyncIterator[bytes]:
    """The answer's body as it arrives (chunks decoded): the relay passes each piece on
    (an SSE event, a long-poll's answer) without waiting for the next. Raises
    ``asyncio.IncompleteReadError`` or ``BadAnswer`` if the body ends early or is malformed."""
    if head.chunked:
        while True:
            line = await reader.readuntil(b"\r\n")
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise BadAnswer(f"not a chunk size: {line[:40]!r}") from None
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":  # (trailers, dropped)
                    pass
                return
            async for piece in _exactly(reader, size):
                yield piece
            if await reader.readexactly(2) != b"\r\n":
                raise BadAnswer("a chunk longer than its size")
    elif head.length is not None:
        async for piece in _exactly(reader, head.length):
            yield piece
    else:
        while piece := await reader.read(PIECE):
            yield piece


async def _exactly(reader: asyncio.StreamReader, size: int) -> AsyncIterator[bytes]:
    while size > 0:
        piece = await reader.read(min(size, PIECE))
        if not piece:
            raise asyncio.IncompleteReadError(b"", size)
        size -= len(piece)
        yield piece
