"""What a node's relay answers when the shard's server gives no answer (``cluster.node.proxy``):
a request that never reached it is a plain "later" (503 with ``Retry-After``: a client may
resend even a plain append), one whose answer was lost after it was sent may have been
stored (502 ``RELAY_IN_DOUBT`` without ``Retry-After``, which the Python client does not
resend for a plain append). Real sockets on loopback: a port nobody listens on, and a
server that reads the whole request and closes the connection without answering."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from typing import Any

from durable_streams_server.cluster.node.proxy import Relay, RelayFailure, relay_read_timeout_s
from durable_streams_server.cluster.node.router import _relay_failed
from pyspark_durable_streams.client import errors


def _scope(port: int) -> dict[str, Any]:
    headers = [(b"host", f"127.0.0.1:{port}".encode()), (b"content-type", b"application/json")]
    headers.append((b"content-length", b"8"))
    return {"type": "http", "method": "POST", "path": "/v1/stream/s", "headers": headers, "query_string": b""}


async def _relay(target: str) -> tuple[RelayFailure | None, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b'{"n": 1}', "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    relay = Relay(read_timeout_s=10)
    try:
        return await relay.relay(_scope(0), receive, send, target), sent
    finally:
        await relay.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class SwallowingServer(threading.Thread):
    """Accepts one connection, reads the request to its body's end, closes without a word."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.received = b""

    def run(self) -> None:
        connection, _ = self.listener.accept()
        with connection:
            while b'{"n": 1}' not in self.received:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                self.received += chunk
        self.listener.close()


def test_a_request_that_never_reached_the_shard_is_a_plain_later() -> None:
    failure, sent = asyncio.run(_relay(f"http://127.0.0.1:{_closed_port()}/v1/stream/s"))
    assert failure is not None and not failure.sent, failure
    assert sent == []
    status, headers, body = _relay_failed(failure)
    assert (status, headers["Retry-After"]) == (503, "1")
    assert json.loads(body)["error"]["code"] == "SHARD_UNAVAILABLE"
    error = errors.error_for_status(method="POST", url="u", status=status, headers=headers, body=b"{}")
    assert errors.not_processed(error)  # (a plain append may be sent again)


def test_a_request_whose_answer_was_lost_is_in_doubt() -> None:
    server = SwallowingServer()
    server.start()
    failure, sent = asyncio.run(_relay(f"http://127.0.0.1:{server.port}/v1/stream/s"))
    server.join(timeout=10)
    assert b'{"n": 1}' in server.received  # the shard's server had the whole append
    assert failure is not None and failure.sent, failure
    assert sent == []
    status, headers, body = _relay_failed(failure)
    assert status == 502 and "Retry-After" not in headers
    assert json.loads(body)["error"]["code"] == "RELAY_IN_DOUBT"
    error = errors.error_for_status(method="POST", url="u", status=status, headers=headers, body=b"{}")
    assert not errors.not_processed(error)  # (the Python client does not resend a plain append)


def test_a_shard_server_that_never_answers_meets_the_read_deadline() -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # (accepts through the backlog, never reads)
    port = listener.getsockname()[1]

    async def relay_once() -> RelayFailure | None:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b'{"n": 1}', "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            raise AssertionError(f"nothing may be sent back: {message}")

        relay = Relay(read_timeout_s=0.5)
        try:
            return await asyncio.wait_for(relay.relay(_scope(port), receive, send, f"http://127.0.0.1:{port}/"), 30)
        finally:
            await relay.close()

    try:
        failure = asyncio.run(relay_once())
    finally:
        listener.close()
    assert failure is not None and failure.sent and "ReadTimeout" in failure.error, failure


def test_the_read_deadline_outlasts_a_healthy_servers_longest_silence() -> None:
    """A long-poll waits up to ``--long-poll-timeout-ms`` and an SSE connection lives
    ``--sse-reconnect-ms``, both silent while nothing is appended: the relay waits twice that."""
    assert relay_read_timeout_s(30_000, 60_000) == 120.0
    assert relay_read_timeout_s(300_000, 60_000) == 600.0
