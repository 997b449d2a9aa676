"""A load generator light enough to measure the servers rather than itself.

``http.client`` costs ~200 µs of CPU per request here (building the request, ``email``-style
header parsing of the response, buffered socket files): about what our server spends on an
append, and on 2 cores the load generator shares the CPUs with the servers it measures. So
every throughput ratio was squeezed towards 1 and every latency carried the client's parsing
(measured: 200 µs against ~40 µs per request for this module's ``Connection``).

This module speaks the least HTTP/1.1 a benchmark needs, over plain sockets with
``TCP_NODELAY``: requests are pre-rendered bytes, a response is its status line, its headers
split once, and a body framed by ``Content-Length`` or chunked encoding (either server may use
either). ``Connection`` is blocking (sequential loads, latency probes); ``drive`` runs many
connections from one thread with a selector, each sending its next request as soon as the
previous answer is complete (the concurrent loads), so one process keeps dozens of
connections busy without threads or a GIL to share.

Both servers get the same bytes: nothing here depends on which one answers.
"""

from __future__ import annotations

import selectors
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

_READ = 65536


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    """Lower-case names; a repeated header keeps its last value."""
    body: bytes


def render(method: str, path: str, port: int, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    """The request's bytes (keep-alive; ``Content-Length`` when it has a body or is a write)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def parse(buffer: bytearray, head_only: bool = False) -> tuple[Response, int] | None:
    """The first complete response in ``buffer`` and its length in bytes; ``None`` if it is not
    all there yet. ``head_only``: the answer to a ``HEAD`` (no body whatever its headers say)."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
    status = int(lines[0][9:12])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    start = end + 4
    if head_only or status in (204, 304) or 100 <= status < 200:
        return Response(status, headers, b""), start
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return _chunked(buffer, start, status, headers)
    length = int(headers.get("content-length", "0"))
    if len(buffer) < start + length:
        return None
    return Response(status, headers, bytes(buffer[start : start + length])), start + length


def _chunked(buffer: bytearray, at: int, status: int, headers: dict[str, str]) -> tuple[Response, int] | None:
    body = bytearray()
    while True:
        line_end = buffer.find(b"\r\n", at)
        if line_end < 0:
            return None
        size = int(bytes(buffer[at:line_end]).split(b";")[0], 16)
        at = line_end + 2
        if size == 0:
            trailer_end = buffer.find(b"\r\n\r\n", at - 2)  # no trailers: the empty line follows at once
            if trailer_end < 0:
                return None
            return Response(status, headers, bytes(body)), trailer_end + 4
        if len(buffer) < at + size + 2:
            return None
        body += buffer[at : at + size]
        at += size + 2


def _socket(port: int, timeout_s: float) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class Connection:
    """One blocking keep-alive connection: ``request`` = ``send`` + ``receive``."""

    def __init__(self, port: int, timeout_s: float = 60) -> None:
        self.port, self.timeout_s = port, timeout_s
        self._sock = _socket(port, timeout_s)
        self._buffer = bytearray()

    def request(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> Response:
        self.send(render(method, path, self.port, body, headers))
        return self.receive(head_only=method == "HEAD")

    def send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def receive(self, head_only: bool = False) -> Response:
        while True:
            response = self._take(head_only)
            if response is not None:
                return response
            chunk = self._sock.recv(_READ)
            if not chunk:
                raise ConnectionError("the server closed the connection before the response was complete")
            self._buffer += chunk

    def close(self) -> None:
        self._sock.close()

    def _take(self, head_only: bool) -> Response | None:
        parsed = parse(self._buffer, head_only)
        if parsed is None:
            return None
        response, used = parsed
        del self._buffer[:used]
        return response


def arrivals(connections: Sequence[Connection], timeout_s: float = 60) -> list[tuple[float, Response]]:
    """One response from each connection (their requests already sent), read from this thread
    as they come: each with the ``time.perf_counter()`` at which it was complete, in the order
    of ``connections``."""
    selector = selectors.DefaultSelector()
    got: dict[int, tuple[float, Response]] = {}
    try:
        for index, conn in enumerate(connections):
            conn._sock.setblocking(False)
            ready = conn._take(head_only=False)  # (bytes read before, e.g. behind an earlier response)
            if ready is not None:
                got[index] = (time.perf_counter(), ready)
            else:
                selector.register(conn._sock, selectors.EVENT_READ, index)
        while len(got) < len(connections):
            events = selector.select(timeout_s)
            if not events:
                raise TimeoutError(f"{len(connections) - len(got)} responses missing after {timeout_s}s")
            for key, _ in events:
                conn = connections[key.data]
                chunk = conn._sock.recv(_READ)
                if not chunk:
                    raise ConnectionError("the server closed a connection before its response was complete")
                conn._buffer += chunk
                response = conn._take(head_only=False)
                if response is not None:
                    got[key.data] = (time.perf_counter(), response)
                    selector.unregister(conn._sock)
    finally:
        selector.close()
        for conn in connections:
            conn._sock.settimeout(conn.timeout_s)
    return [got[index] for index in range(len(connections))]


def drive(
    port: int,
    requests: Sequence[Iterator[bytes]],
    check: Callable[[Response], None],
    deadline: float | None = None,
    timeout_s: float = 60,
) -> int:
    """One connection per iterator of requests, all from this thread: each connection sends its
    next request when the previous response is complete, until its iterator ends or
    ``deadline`` (``time.perf_counter``) passes. Every response goes through ``check``; the
    number of responses."""
    selector = selectors.DefaultSelector()
    open_: dict[int, tuple[socket.socket, bytearray, Iterator[bytes]]] = {}
    done = 0
    try:
        for source in requests:
            first = next(source, None)
            if first is None:
                continue
            sock = _socket(port, timeout_s)
            sock.setblocking(False)
            sock.sendall(first)  # small requests: the socket's buffer takes them whole
            open_[sock.fileno()] = (sock, bytearray(), source)
            selector.register(sock, selectors.EVENT_READ)
        while open_:
            events = selector.select(timeout_s)
            if not events:
                raise TimeoutError(f"no response within {timeout_s}s")
            for key, _ in events:
                sock, buffer, source = open_[key.fd]
                chunk = sock.recv(_READ)
                if not chunk:
                    raise ConnectionError("the server closed a connection with a request unanswered")
                buffer += chunk
                parsed = parse(buffer)
                if parsed is None:
                    continue
                response, used = parsed
                del buffer[:used]
                check(response)
                done += 1
                following = None if deadline is not None and time.perf_counter() >= deadline else next(source, None)
                if following is None:
                    selector.unregister(sock)
                    del open_[key.fd]
                    sock.close()
                else:
                    sock.sendall(following)
    finally:
        for sock, _, _ in open_.values():
            sock.close()
        selector.close()
    return done
