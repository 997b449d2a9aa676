"""A refused head does not overtake the requests pipelined before it (``fastpath/guards.py``: ``_refuse``).

httptools parses a whole read at once: a request, then bytes it cannot parse (or a head over
``--max-header-bytes``) right behind it. The refusal (uvicorn's plain 400, our 431) closes
the connection; the requests before it are still in their handlers then. Their answers must
go first: a client that reads a 400 must be able to trust that its request did nothing (the
fuzz test found a ``DELETE`` answered 400 and executed). A broken *body* belongs to its own
request and is refused at once. These are the head guards', not the fast path's: each test runs
with the fast path on and off. Real server in this process, raw sockets.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import requests
from inprocess import serving
from rawhttp import connection_closed_by_server
from servers import wait_for

from durable_streams_server import ServerConfig

TEXT = {"Content-Type": "text/plain"}
GARBAGE = b"Connection: close\r\n\r\n"
"""Not a request line: what a stray blank line in a client's headers leaves behind."""


def _statuses(sock: socket.socket) -> list[bytes]:
    """The status lines of everything the server sends until it closes the connection."""
    data = b""
    sock.settimeout(30)
    while chunk := sock.recv(65536):
        data += chunk
    return [line for line in data.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


FAST_PATH = pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "fast-path-off"])


@FAST_PATH
def test_a_delete_then_unparseable_bytes_answers_the_delete_first(tmp_path: Path, fast_path: bool) -> None:
    with serving(ServerConfig(data_dir=tmp_path), fast_path=fast_path) as (url, _):
        stream = f"{url}/v1/stream/d"
        assert requests.put(stream, headers=TEXT).status_code == 201
        with socket.create_connection(("127.0.0.1", _port(url))) as sock:
            sock.sendall(b"DELETE /v1/stream/d HTTP/1.1\r\nHost: x\r\n\r\n" + GARBAGE)
            assert _statuses(sock) == [b"HTTP/1.1 204 No Content", b"HTTP/1.1 400 Bad Request"]
        assert requests.head(stream).status_code == 404


@FAST_PATH
def test_an_append_then_unparseable_bytes_answers_the_append_first(tmp_path: Path, fast_path: bool) -> None:
    with serving(ServerConfig(data_dir=tmp_path), fast_path=fast_path) as (url, server):
        stream = f"{url}/v1/stream/a"
        assert requests.put(stream, headers=TEXT).status_code == 201
        post = b"POST /v1/stream/a HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
        with socket.create_connection(("127.0.0.1", _port(url))) as sock:
            sock.sendall(post + post + GARBAGE)
            assert _statuses(sock) == [b"HTTP/1.1 204 No Content"] * 2 + [b"HTTP/1.1 400 Bad Request"]
        assert requests.get(stream, params={"offset": "-1"}).content == b"okok"
        if fast_path:
            assert server.fast_path is not None and server.fast_path.served >= 3  # (the PUT and both POSTs)
        else:
            assert server.fast_path is None


@FAST_PATH
def test_an_oversized_head_waits_for_the_long_poll_before_it(tmp_path: Path, fast_path: bool) -> None:
    config = ServerConfig(data_dir=tmp_path, long_poll_timeout_ms=300, max_header_bytes=2048)
    with serving(config, fast_path=fast_path) as (url, served):
        stream = f"{url}/v1/stream/lp"
        assert requests.put(stream, headers=TEXT).status_code == 201  # (nothing to read: the poll times out)
        poll = b"GET /v1/stream/lp?offset=now&live=long-poll HTTP/1.1\r\nHost: x\r\n\r\n"
        oversized = b"GET /v1/stream/lp HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 4096  # (never completed)
        with socket.create_connection(("127.0.0.1", _port(url))) as sock:
            sock.sendall(poll)
            # (the poll parked: the next head's bytes come in a read of their own)
            wait_for(lambda: served.app.live_readers.long_poll == 1, interval_s=0.01)
            sock.sendall(oversized)
            statuses = _statuses(sock)
        assert statuses == [b"HTTP/1.1 204 No Content", b"HTTP/1.1 431 Request Header Fields Too Large"]


@FAST_PATH
def test_a_broken_body_is_refused_at_once(tmp_path: Path, fast_path: bool) -> None:
    with serving(ServerConfig(data_dir=tmp_path), fast_path=fast_path) as (url, _):
        stream = f"{url}/v1/stream/b"
        assert requests.put(stream, headers=TEXT).status_code == 201
        broken = b"POST /v1/stream/b HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
        broken += b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n"  # (not a chunk size)
        with socket.create_connection(("127.0.0.1", _port(url))) as sock:
            sock.sendall(broken)
            assert _statuses(sock) == [b"HTTP/1.1 400 Bad Request"]
            assert connection_closed_by_server(sock, within_s=5)
        assert requests.get(stream, params={"offset": "-1"}).content == b""
