"""A node's relay between real processes: the bytes a client sends, as it frames them (chunked,
``Expect: 100-continue``), reach the shard's server whole, and what it answers (a catch-up read
longer than one piece, the answer to a ``HEAD``) reaches the client whole. Requests on bare
sockets (``rawhttp``: exactly these bytes), answers parsed by h11."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from cluster_support import serving, start_node
from rawhttp import RawResponse, exchange, request_bytes
from servers import ServerProcess, wait_for

from durable_streams_server.cluster.node.upstream import PIECE

pytestmark = pytest.mark.slow

RELAY = (b"Durable-Streams-Redirects", b"relay")
OCTETS = (b"Content-Type", b"application/octet-stream")


def test_a_node_relays_what_clients_send_as_they_frame_it(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    node = start_node(server_factory, ["--storage-uri", str(tmp_path / "root"), "--shards", "1"], "n0", tmp_path)
    wait_for(serving([node], 1), timeout_s=60)
    port, path = node.process.port, f"/v1/stream/relayed-{uuid.uuid4().hex[:8]}".encode()

    def relayed(
        method: str, target: bytes, body: bytes | None, *headers: tuple[bytes, bytes], **kw: bool
    ) -> RawResponse:
        return exchange(port, request_bytes(method, target, [RELAY, *headers], body, **kw), method)

    assert relayed("PUT", path, b"", OCTETS).status == 201
    big, small = os.urandom(PIECE + 100_000), b"x" * 4096
    assert relayed("POST", path, big, OCTETS, chunked=True).status == 204
    assert relayed("POST", path, small, OCTETS, (b"Expect", b"100-continue")).status == 204

    read, offset = b"", b"-1"
    while True:
        answer = relayed("GET", path + b"?offset=" + offset, None)
        assert answer.status == 200, answer
        read += answer.body
        offset = answer.headers["stream-next-offset"].encode()
        if answer.headers.get("stream-up-to-date") == "true":
            break
    assert read == big + small

    head = relayed("HEAD", path, None)
    assert (head.status, head.body, head.headers["stream-next-offset"].encode()) == (200, b"", offset)
    assert head.headers["date"].count("GMT") == 1 and head.headers["server"] == "uvicorn"  # (once each, the node's)
    assert relayed("GET", path + b"?offset=" + offset, None).status == 200  # (the connection pool still answers)
