"""The relay to a shard server that serves HTTPS (a node run with ``--tls-certfile`` passes it
to its shard servers, whose URLs are then ``https``): the certificate is verified against the
machine's trusted ones (``SSL_CERT_FILE`` names more), and one that is not trusted fails before
anything is sent (a plain 503 with ``Retry-After``). A real server on loopback, with a
self-signed certificate made in the test."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from security_support import self_signed_certificate
from servers import ServerProcess

from durable_streams_server.cluster.node.proxy import Relay, RelayFailure

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def https(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    directory = tmp_path_factory.mktemp("relay-tls")
    cert, key = self_signed_certificate(directory)
    server = ServerProcess(directory / "data", ["--tls-certfile", str(cert), "--tls-keyfile", str(key)]).start()
    yield server, cert
    server.kill()


def _exchange(port: int, method: str, path: str, body: bytes = b"") -> tuple[RelayFailure | None, list[dict[str, Any]]]:
    headers = [(b"host", f"127.0.0.1:{port}".encode()), (b"content-type", b"application/json")]
    if method in ("PUT", "POST"):
        headers.append((b"content-length", str(len(body)).encode()))
    scope = {"type": "http", "method": method, "path": path, "headers": headers, "query_string": b""}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def once() -> RelayFailure | None:
        relay = Relay(read_timeout_s=10)
        try:
            return await relay.relay(scope, receive, send, f"https://127.0.0.1:{port}{path}")
        finally:
            await relay.close()

    return asyncio.run(once()), sent


def test_a_trusted_shard_servers_https_is_relayed(
    https: tuple[ServerProcess, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, cert = https
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    path = f"/v1/stream/tls-{uuid.uuid4().hex[:8]}"
    statuses = []
    for method, body in (("PUT", b""), ("POST", b'{"n": 1}'), ("GET", b"")):
        failure, sent = _exchange(server.port, method, path + ("?offset=-1" if method == "GET" else ""), body)
        assert failure is None, failure
        statuses.append(sent[0]["status"])
    assert statuses == [201, 204, 200]
    assert json.loads(b"".join(message.get("body", b"") for message in sent[1:])) == [{"n": 1}]


def test_an_untrusted_certificate_fails_before_anything_is_sent(https: tuple[ServerProcess, Path]) -> None:
    server, _ = https
    failure, sent = _exchange(server.port, "POST", "/v1/stream/never", b'{"n": 1}')
    assert failure is not None and not failure.sent and "CERTIFICATE_VERIFY_FAILED" in failure.error, failure
    assert sent == []
