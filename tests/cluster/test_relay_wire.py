"""The relay's HTTP/1.1 pass-through (``cluster.node.proxy.Relay`` over ``cluster.node.upstream``), at the
byte level: real sockets on loopback, a shard server scripted per connection (what it reads,
what it answers, when it closes), the relay driven through its ASGI ``receive``/``send``.

What it must keep: one kept-alive connection for many requests; the client's ``Host`` and
headers but the hop-by-hop ones, both ways; bodies streamed both ways (a chunked request body,
an answer passed on piece by piece as the server sends it); a connection the server closed
while idle never used, and one closed under a request never used to send it again (the server
may have read it); an answer that breaks off left incomplete to the client.
"""

from __future__ import annotations

import asyncio
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from servers import wait_for

from durable_streams_server.cluster.node.proxy import Relay, RelayFailure, relay_idle_s
from durable_streams_server.cluster.node.upstream import IDLE_S

Script = Callable[["Peer"], None]


class Peer:
    """One accepted connection, read as a shard server reads it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def request(self) -> tuple[list[bytes], bytes] | None:
        """The next request's head lines (the request line first) and its body (Content-Length
        or chunked); ``None`` at the end of the connection."""
        while b"\r\n\r\n" not in self.buffer:
            if not self.more():
                return None
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        fields = {line.split(b":", 1)[0].strip().lower(): line.split(b":", 1)[1].strip() for line in lines[1:]}
        if fields.get(b"transfer-encoding") == b"chunked":
            body = b""
            while True:
                while b"\r\n" not in self.buffer:
                    assert self.more()
                size_line, self.buffer = self.buffer.split(b"\r\n", 1)
                size = int(size_line, 16)
                while len(self.buffer) < size + 2:
                    assert self.more()
                body, self.buffer = body + self.buffer[:size], self.buffer[size + 2 :]
                if size == 0:
                    return lines, body
        length = int(fields.get(b"content-length", b"0"))
        while len(self.buffer) < length:
            assert self.more()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return lines, body

    def closed_by_relay(self, timeout_s: float) -> bool:
        """Whether the relay closes the connection within ``timeout_s`` (sending nothing more)."""
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def more(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)


class ScriptedServer(threading.Thread):
    """Accepts connections on loopback; runs ``script`` on each (a thread each), counting them
    and recording every request it read."""

    def __init__(self, script: Script) -> None:
        super().__init__(daemon=True)
        self.script = script
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.connections = 0
        self.requests: list[tuple[list[bytes], bytes]] = []
        self.start()

    def run(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            self.script(Peer(sock))

    def read(self, peer: Peer) -> tuple[list[bytes], bytes] | None:
        request = peer.request()
        if request is not None:
            self.requests.append(request)
        return request

    def close(self) -> None:
        self.listener.close()


NO_CONTENT = (
    b"HTTP/1.1 204 No Content\r\ndate: Sun, 29 Nov 2026 07:00:00 GMT\r\nserver: uvicorn\r\nconnection: keep-alive\r\n"
    b"keep-alive: timeout=5\r\nx-kept: yes\r\n\r\n"
)
"""(``Date`` and ``Server`` are the node's own to send)"""


def _scope(port: int, method: str = "POST", extra: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    headers = [(b"host", b"node.example:8080"), (b"content-type", b"application/json")]
    return {"type": "http", "method": method, "path": "/v1/stream/s", "headers": headers + (extra or [])}


class Client:
    """The node's side of one relayed request: what ``receive`` hands out, what ``send`` got."""

    def __init__(self, *bodies: bytes, on_send: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.bodies = list(bodies)
        self.ended = False
        self.gone = asyncio.Event()
        self.sent: list[dict[str, Any]] = []
        self.on_send = on_send

    async def receive(self) -> dict[str, Any]:
        """The body's pieces, then (as uvicorn) nothing until the client goes away."""
        if not self.ended:
            body = self.bodies.pop(0) if self.bodies else b""
            self.ended = not self.bodies
            return {"type": "http.request", "body": body, "more_body": not self.ended}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        if self.on_send is not None:
            self.on_send(message)

    def body(self) -> bytes:
        return b"".join(message.get("body", b"") for message in self.sent[1:])

    def complete(self) -> bool:
        return bool(self.sent) and not self.sent[-1].get("more_body", False) and len(self.sent) > 1


def _append_scope(port: int) -> dict[str, Any]:
    hop = [(b"connection", b"keep-alive"), (b"keep-alive", b"timeout=9"), (b"te", b"trailers")]
    hop += [(b"proxy-authorization", b"Basic eA=="), (b"upgrade", b"h2c"), (b"content-length", b"8")]
    return _scope(port, extra=[*hop, (b"authorization", b"Bearer t")])


def relay_each(
    port: int,
    exchanges: list[tuple[dict[str, Any], Client]],
    read_timeout_s: float = 10,
    pause_s: float = 0.0,
    idle_s: float = IDLE_S,
) -> list[RelayFailure | None]:
    """Relay each request in turn through one ``Relay`` (its pool kept between them), ``pause_s``
    after each; what each relay returned."""

    async def run() -> list[RelayFailure | None]:
        relay, results = Relay(read_timeout_s=read_timeout_s, idle_s=idle_s), []
        try:
            for scope, client in exchanges:
                target = f"http://127.0.0.1:{port}/v1/stream/s" + ("?x=1" if scope["method"] == "POST" else "")
                results.append(await relay.relay(scope, client.receive, client.send, target))
                await asyncio.sleep(pause_s)
        finally:
            await relay.close()
        return results

    return asyncio.run(run())


def test_appends_share_one_kept_alive_connection_with_the_clients_headers() -> None:
    def script(peer: Peer) -> None:
        while server.read(peer) is not None:
            peer.sock.sendall(NO_CONTENT)

    server = ScriptedServer(script)

    clients = [Client(b'{"n": %d}' % n) for n in range(5)]
    assert relay_each(server.port, [(_append_scope(server.port), client) for client in clients]) == [None] * 5
    server.close()
    assert server.connections == 1
    assert [body for _, body in server.requests] == [b'{"n": %d}' % n for n in range(5)]
    lines, _ = server.requests[0]
    assert lines[0] == b"POST /v1/stream/s?x=1 HTTP/1.1"
    names = [line.split(b":", 1)[0] for line in lines[1:]]
    assert sorted(names) == [b"authorization", b"content-length", b"content-type", b"host"], lines
    assert b"host: node.example:8080" in lines and b"content-length: 8" in lines
    for client in clients:
        start = client.sent[0]
        assert start["status"] == 204 and start["headers"] == [(b"x-kept", b"yes")], start
        assert client.complete()


def test_a_chunked_body_and_a_streamed_answer_pass_through_as_they_come() -> None:
    """A request body without a length reaches the server chunked, whole; the answer's first
    piece reaches the client while the server still holds the second (an SSE event, a
    long-poll's wake), which the server sends only once the client has the first."""
    first_seen = threading.Event()
    streamed: list[bool] = []

    def script(peer: Peer) -> None:
        assert server.read(peer) is not None
        peer.sock.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n")
        peer.sock.sendall(b"6\r\nfirst\n\r\n")
        streamed.append(first_seen.wait(timeout=10))
        peer.sock.sendall(b"7\r\nsecond\n\r\n0\r\n\r\n")

    server = ScriptedServer(script)

    def on_send(message: dict[str, Any]) -> None:
        if message.get("body") == b"first\n":
            first_seen.set()

    client = Client(b"part one, ", b"", b"part two", on_send=on_send)
    scope = _scope(server.port, extra=[(b"transfer-encoding", b"chunked")])

    assert relay_each(server.port, [(scope, client)], read_timeout_s=30) == [None]
    server.close()
    assert server.requests[0][1] == b"part one, part two"
    assert b"transfer-encoding: chunked" in server.requests[0][0]
    assert streamed == [True]
    assert client.sent[0]["status"] == 200 and (b"transfer-encoding", b"chunked") not in client.sent[0]["headers"]
    assert client.body() == b"first\nsecond\n" and client.complete()


def test_a_connection_the_server_closed_while_idle_is_not_used_again() -> None:
    """The server closes a kept-alive connection after one answer (its keep-alive timeout):
    the next request goes on a new connection and is answered."""

    def script(peer: Peer) -> None:
        if server.read(peer) is not None:
            peer.sock.sendall(NO_CONTENT)

    server = ScriptedServer(script)

    exchanges = [(_append_scope(server.port), Client(b'{"n": 1}')) for _ in range(2)]
    assert relay_each(server.port, exchanges, pause_s=0.3) == [None, None]  # (the end of stream arrives meanwhile)
    server.close()
    assert (server.connections, len(server.requests)) == (2, 2)


def test_a_connection_closed_under_a_request_is_in_doubt_and_never_sent_again() -> None:
    """The server reads the second request on a kept-alive connection and closes it without
    an answer: the request may have been stored, so it is answered in doubt, and never sent
    again on another connection."""

    def script(peer: Peer) -> None:
        if server.read(peer) is not None:
            peer.sock.sendall(NO_CONTENT)
        server.read(peer)

    server = ScriptedServer(script)
    clients = [Client(b'{"n": %d}' % n) for n in range(2)]
    first, second = relay_each(server.port, [(_append_scope(server.port), client) for client in clients])
    assert clients[1].sent == []
    time.sleep(0.3)  # (a connection opened to send it again would be accepted meanwhile: time is the check)
    server.close()
    assert first is None
    assert second is not None and second.sent, second
    assert (server.connections, [body for _, body in server.requests]) == (1, [b'{"n": 0}', b'{"n": 1}'])


def test_an_answer_that_breaks_off_reaches_the_client_incomplete() -> None:
    """The server sends 10 of the 100 bytes it announced, then closes: the client has the
    start and the 10 bytes, and no end of the answer (its connection is then closed)."""

    def script(peer: Peer) -> None:
        server.read(peer)
        peer.sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")

    server = ScriptedServer(script)
    client = Client()

    assert relay_each(server.port, [(_scope(server.port, "GET"), client)]) == [None]
    server.close()
    assert client.sent[0]["status"] == 200 and (b"content-length", b"100") in client.sent[0]["headers"]
    assert client.body() == b"0123456789" and not client.complete()


def test_a_silent_server_mid_answer_meets_the_read_deadline() -> None:
    """The server sends the head and one chunk, then nothing: the relay gives up after the
    read deadline, the client's answer left incomplete."""
    release = threading.Event()

    def script(peer: Peer) -> None:
        server.read(peer)
        peer.sock.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")
        release.wait(timeout=30)

    server = ScriptedServer(script)
    client = Client()

    started = time.monotonic()
    failure = relay_each(server.port, [(_scope(server.port, "GET"), client)], read_timeout_s=0.5)
    took = time.monotonic() - started
    release.set()
    server.close()
    assert failure == [None] and 0.5 <= took < 5, took
    assert client.body() == b"abc" and not client.complete()


def test_the_answer_to_a_head_has_no_body_and_keeps_the_connection() -> None:
    def script(peer: Peer) -> None:
        while server.read(peer) is not None:
            peer.sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 1234\r\ncontent-type: text/plain\r\n\r\n")

    server = ScriptedServer(script)

    clients = [Client(), Client()]
    assert relay_each(server.port, [(_scope(server.port, "HEAD"), client) for client in clients], 5) == [None, None]
    server.close()
    assert server.connections == 1 and [lines[0] for lines, _ in server.requests] == [b"HEAD /v1/stream/s HTTP/1.1"] * 2
    for client in clients:
        assert (b"content-length", b"1234") in client.sent[0]["headers"] and client.body() == b"" and client.complete()


def test_a_live_reads_client_that_goes_away_closes_the_shard_servers_connection() -> None:
    """An SSE client leaves after its first event: the relay closes its connection to the
    shard server at once, instead of holding both until the server ends the SSE response."""
    closed: list[bool] = []

    def script(peer: Peer) -> None:
        server.read(peer)
        peer.sock.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n")
        closed.append(peer.closed_by_relay(timeout_s=20))

    server = ScriptedServer(script)

    def on_send(message: dict[str, Any]) -> None:
        if message.get("body"):
            client.gone.set()

    client = Client(on_send=on_send)
    scope = {**_scope(server.port, "GET"), "query_string": b"offset=-1&live=sse"}
    started = time.monotonic()
    assert relay_each(server.port, [(scope, client)], read_timeout_s=30) == [None]
    took = time.monotonic() - started
    wait_for(lambda: bool(closed), message=lambda: f"(took {took:.1f} s)")
    server.close()
    assert closed == [True] and took < 5, (closed, took)
    assert client.body() == b"data: 1\n\n" and not client.complete()


def test_idle_connections_to_a_server_no_longer_asked_are_closed() -> None:
    """A shard's server that moved is asked no more: its idle connection is closed once it is
    too old to use, when the relay next gives a connection back (to another server)."""
    closed: list[bool] = []

    def left_behind(peer: Peer) -> None:
        server.read(peer)
        peer.sock.sendall(NO_CONTENT)
        closed.append(peer.closed_by_relay(timeout_s=20))

    def answering(peer: Peer) -> None:
        while other.read(peer) is not None:
            peer.sock.sendall(NO_CONTENT)

    server, other = ScriptedServer(left_behind), ScriptedServer(answering)

    async def run() -> None:
        relay = Relay(read_timeout_s=10)
        try:
            for port in (server.port, other.port):
                client = Client(b'{"n": 1}')
                target = f"http://127.0.0.1:{port}/v1/stream/s"
                assert await relay.relay(_append_scope(port), client.receive, client.send, target) is None
                await asyncio.sleep(IDLE_S + 0.2)
            assert closed == [True]
        finally:
            await relay.close()

    asyncio.run(run())
    server.close()
    other.close()


def test_a_server_that_stops_reading_a_long_body_meets_the_deadline() -> None:
    """The server reads the head, then nothing of the body: the relay gives up after the
    deadline (the server had part of the request: in doubt)."""
    release = threading.Event()

    def script(peer: Peer) -> None:
        while b"\r\n\r\n" not in peer.buffer:
            assert peer.more()
        release.wait(timeout=30)

    server = ScriptedServer(script)
    client = Client(*[b"x" * 1024 * 1024] * 32)
    scope = _scope(server.port, extra=[(b"transfer-encoding", b"chunked")])
    started = time.monotonic()
    (failure,) = relay_each(server.port, [(scope, client)], read_timeout_s=0.5)
    took = time.monotonic() - started
    release.set()
    server.close()
    assert failure is not None and failure.sent and "WriteTimeout" in failure.error, failure
    assert took < 10 and client.sent == [], took


def test_a_server_that_takes_no_connection_meets_the_connect_deadline() -> None:
    """A listener whose backlog is full drops further connection attempts: the relay gives up
    after its connect deadline, the request never sent (a plain 503 for the client)."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    port = listener.getsockname()[1]
    queued = []
    for _ in range(3):  # (fill the backlog: never accepted)
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        queued.append(sock)
    wait_for(lambda: bool(select.select([], queued, [], 0)[1]))  # (one is in: the backlog is full)

    async def once() -> RelayFailure | None:
        relay = Relay(read_timeout_s=10)
        relay.pool.connect_timeout_s = 0.5
        client = Client(b'{"n": 1}')
        try:
            target = f"http://127.0.0.1:{port}/v1/stream/s"
            return await relay.relay(_append_scope(port), client.receive, client.send, target)
        finally:
            await relay.close()

    started = time.monotonic()
    try:
        failure = asyncio.run(once())
    finally:
        listener.close()
        for sock in queued:
            sock.close()
    assert failure is not None and not failure.sent and "ConnectTimeout" in failure.error, failure
    assert 0.5 <= time.monotonic() - started < 5


def test_a_connection_idle_longer_than_the_servers_keep_alive_allows_is_not_used_again() -> None:
    """A connection idle for half the shard servers' keep-alive timeout is not written on (the
    server may be closing it that very moment): the next request takes a new one."""

    def script(peer: Peer) -> None:
        while server.read(peer) is not None:
            peer.sock.sendall(NO_CONTENT)

    server = ScriptedServer(script)
    idle_s = relay_idle_s(keep_alive_timeout_s=1)
    exchanges = [(_append_scope(server.port), Client(b'{"n": 1}')) for _ in range(3)]
    assert relay_each(server.port, exchanges, pause_s=idle_s + 0.1, idle_s=idle_s) == [None] * 3
    server.close()
    assert (idle_s, server.connections, len(server.requests)) == (0.5, 3, 3)
