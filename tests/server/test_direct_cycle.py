"""The connection handling of fast-path requests (``http/fastpath/cycle.py``), byte by byte on a socket.

A fast-path append or create is served from the parser's callbacks in a ``FastCycle`` instead
of uvicorn's request cycle; what uvicorn did for it must still happen: bodies that arrive
late are waited for, a client gone mid-body leaves nothing stored and the server serving,
``Connection: close`` closes, requests uvicorn must answer itself (``Expect: 100-continue``,
HTTP/1.0) take the app's path, a long pipeline mixing both paths is answered in order, and
an idle connection after a fast-path response gets the head deadline. A real server in this
process (``inprocess.serving``), real Delta tables.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import requests
from inprocess import serving
from rawhttp import connection_closed_by_server, text_post_head
from servers import wait_for

from durable_streams_server import ServerConfig
from durable_streams_server.http.fastpath.cycle import DefaultLines
from durable_streams_server.http.fastpath.route import FastPath

TEXT = {"Content-Type": "text/plain"}


def _heads(sock: socket.socket, count: int) -> list[bytes]:
    """The heads of ``count`` bodiless responses."""
    data = b""
    while data.count(b"\r\n\r\n") < count:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection after {data!r}"
        data += chunk
    return data.split(b"\r\n\r\n")[:count]


def _header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b": ")
        if key.lower() == name:
            return value
    return None


def _stored(url: str) -> bytes:
    return requests.get(url, params={"offset": "-1"}).content


@contextlib.contextmanager
def _one_stream(config: ServerConfig, name: str) -> Iterator[tuple[str, FastPath, Callable[[], socket.socket]]]:
    """A server with the text stream ``name`` created: its URL, the fast path (``served``
    counted from after the create) and a way to open a socket to the server."""
    with serving(config) as (url, server):
        assert server.fast_path is not None
        stream = f"{url}/v1/stream/{name}"
        assert requests.put(stream, headers=TEXT).status_code == 201
        server.fast_path.served = 0
        port = int(url.rsplit(":", 1)[1])
        yield stream, server.fast_path, lambda: socket.create_connection(("127.0.0.1", port), timeout=30)


def test_a_body_that_came_with_its_head_is_checked_against_the_limit(tmp_path: Path) -> None:
    """A body all there when the request starts is handed to the handler whole: the same limit
    as a body read in chunks (413, nothing stored or created), the same 204 / 201 within it."""
    config = ServerConfig(data_dir=tmp_path, max_body_bytes=100)
    with _one_stream(config, "whole") as (stream, fast, connect), connect() as sock:
        put = b"PUT /v1/stream/made HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n"
        sock.sendall(text_post_head(b"/v1/stream/whole", 101) + b"x" * 101)  # one write: head and body together
        sock.sendall(put % 101 + b"y" * 101)
        sock.sendall(text_post_head(b"/v1/stream/whole", 100) + b"x" * 100)
        sock.sendall(put % 100 + b"y" * 100)
        heads = _heads_with_bodies(sock, 4)
        assert [head.split(b" ")[1] for head in heads] == [b"413", b"413", b"204", b"201"]
        assert fast.served == 4
        assert _stored(stream) == b"x" * 100
        assert _stored(stream.replace("/whole", "/made")) == b"y" * 100


def _heads_with_bodies(sock: socket.socket, count: int) -> list[bytes]:
    """The heads of ``count`` responses, skipping each one's body (``Content-Length``)."""
    data, heads = b"", []
    while len(heads) < count:
        end = data.find(b"\r\n\r\n")
        length = int(_header(data[:end], b"content-length") or b"0") if end >= 0 else 0
        if end < 0 or len(data) < end + 4 + length:
            chunk = sock.recv(65536)
            assert chunk, f"the server closed the connection after {heads!r}"
            data += chunk
            continue
        heads.append(data[:end])
        data = data[end + 4 + length :]
    return heads


def test_a_body_that_arrives_late_is_waited_for(tmp_path: Path) -> None:
    with _one_stream(ServerConfig(data_dir=tmp_path), "late") as (stream, fast, connect), connect() as sock:
        sock.sendall(text_post_head(b"/v1/stream/late", 10))
        wait_for(lambda: fast.served == 1, message=lambda: "(the request never started on its head alone)")
        sock.sendall(b"0123")
        time.sleep(0.2)  # (the rest comes later, in a read of its own: time is the scenario)
        sock.sendall(b"456789")
        (head,) = _heads(sock, 1)
        assert head.startswith(b"HTTP/1.1 204 ")
        assert fast.served == 1
        assert _stored(stream) == b"0123456789"


def test_a_client_gone_mid_body_leaves_nothing_stored(tmp_path: Path) -> None:
    with _one_stream(ServerConfig(data_dir=tmp_path), "gone") as (stream, fast, connect):
        with connect() as sock:
            sock.sendall(text_post_head(b"/v1/stream/gone", 10) + b"012")
            wait_for(lambda: fast.served == 1, message=lambda: "(the request never started)")
        metrics = fast.policy.metrics
        wait_for(lambda: metrics.in_flight == 0, interval_s=0.02)  # the request ended (not left waiting for its body)
        assert fast.served == 1
        assert requests.post(stream, headers=TEXT, data=b"after").status_code == 204
        assert _stored(stream) == b"after"


def test_connection_close_is_answered_and_closed(tmp_path: Path) -> None:
    with _one_stream(ServerConfig(data_dir=tmp_path), "c") as (stream, fast, connect), connect() as sock:
        sock.sendall(text_post_head(b"/v1/stream/c", 1, b"Connection: close") + b"c")
        (head,) = _heads(sock, 1)
        assert head.startswith(b"HTTP/1.1 204 ")
        assert _header(head, b"connection") == b"close"
        assert connection_closed_by_server(sock, within_s=5)
        assert fast.served == 1
        assert _stored(stream) == b"c"


def test_expect_continue_and_http_1_0_take_the_apps_path(tmp_path: Path) -> None:
    with _one_stream(ServerConfig(data_dir=tmp_path), "e") as (stream, fast, connect):
        with connect() as sock:
            sock.sendall(text_post_head(b"/v1/stream/e", 2, b"Expect: 100-continue"))
            (interim,) = _heads(sock, 1)
            assert interim == b"HTTP/1.1 100 Continue"
            sock.sendall(b"ab")
            (head,) = _heads(sock, 1)
            assert head.startswith(b"HTTP/1.1 204 ")
        with connect() as sock:
            sock.sendall(text_post_head(b"/v1/stream/e", 2).replace(b"HTTP/1.1", b"HTTP/1.0", 1) + b"cd")
            (head,) = _heads(sock, 1)
            assert head.startswith(b"HTTP/1.1 204 ")
            assert connection_closed_by_server(sock, within_s=5)  # (HTTP/1.0: no keep-alive asked for)
        assert fast.served == 0
        assert _stored(stream) == b"abcd"


def test_a_long_pipeline_of_both_paths_is_answered_in_order(tmp_path: Path) -> None:
    """40 appends in one write, every fifth chunked (the app's path): 40 answers in order."""
    bodies = [b"m%02d;" % index for index in range(40)]
    chunked = b"POST /v1/stream/p HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
    chunked += b"Transfer-Encoding: chunked\r\n\r\n"
    wire = b"".join(
        chunked + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        if index % 5 == 4
        else text_post_head(b"/v1/stream/p", len(body)) + body
        for index, body in enumerate(bodies)
    )
    with _one_stream(ServerConfig(data_dir=tmp_path), "p") as (stream, fast, connect):
        with connect() as sock:
            sock.sendall(wire)
            heads = _heads(sock, 40)
        assert all(head.startswith(b"HTTP/1.1 204 ") for head in heads)
        offsets = [_header(head, b"stream-next-offset") for head in heads]
        assert offsets == [b"%016d_%016d" % (index + 1, 0) for index in range(40)]
        assert fast.served == 32
        assert _stored(stream) == b"".join(bodies)


def test_an_idle_connection_after_a_lean_answer_gets_the_head_deadline(tmp_path: Path) -> None:
    """The head deadline (``--request-timeout-s``, here 0.5 s) starts again after a fast-path
    response: the connection is closed well before uvicorn's keep-alive timeout (5 s)."""
    config = ServerConfig(data_dir=tmp_path, request_timeout_s=0.5)
    with _one_stream(config, "i") as (_, fast, connect), connect() as sock:
        sock.sendall(text_post_head(b"/v1/stream/i", 1) + b"i")
        (head,) = _heads(sock, 1)
        assert head.startswith(b"HTTP/1.1 204 ")
        started = time.monotonic()
        assert connection_closed_by_server(sock, within_s=4)
        assert time.monotonic() - started < 3
        assert fast.served == 1


def test_a_large_read_and_a_head_on_one_connection(tmp_path: Path) -> None:
    """A read's body larger than what is written with its head (and a HEAD: the length, no
    body), keep-alive between them, then an append on the same connection."""
    parts = [bytes([65 + index]) * 30_000 for index in range(3)]
    with _one_stream(ServerConfig(data_dir=tmp_path), "big") as (stream, fast, connect), connect() as sock:
        for part in parts:
            assert requests.post(stream, headers=TEXT, data=part).status_code == 204
        sock.sendall(b"GET /v1/stream/big?offset=-1 HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert _header(head, b"content-length") == b"90000"
        while len(body) < 90_000:
            body += sock.recv(65536)
        assert body == b"".join(parts)
        sock.sendall(b"HEAD /v1/stream/big HTTP/1.1\r\nHost: x\r\n\r\n" + text_post_head(b"/v1/stream/big", 1) + b"!")
        heads = _heads(sock, 2)
        assert heads[0].startswith(b"HTTP/1.1 200 ") and heads[1].startswith(b"HTTP/1.1 204 ")
        assert _header(heads[1], b"stream-next-offset") == b"%016d_%016d" % (4, 0)
        assert fast.served == 3 + 3
        assert _stored(stream) == b"".join(parts) + b"!"


def test_a_long_poll_whose_client_left_is_observed_with_its_status(tmp_path: Path) -> None:
    """The reader hangs up while parked: nothing is written, and /metrics counts the long-poll's
    own answer (204 at the timeout), as the gate does, not a server error."""
    config = ServerConfig(data_dir=tmp_path, long_poll_timeout_ms=300)
    with _one_stream(config, "lp") as (stream, fast, connect):
        tail = requests.post(stream, headers=TEXT, data=b"x").headers["Stream-Next-Offset"]
        with connect() as sock:
            sock.sendall(b"GET /v1/stream/lp?offset=%s&live=long-poll HTTP/1.1\r\nHost: x\r\n\r\n" % tail.encode())
            wait_for(lambda: fast.policy.live_readers.long_poll == 1, message=lambda: "(the long-poll never parked)")
        wait_for(lambda: fast.policy.metrics.in_flight == 0, interval_s=0.02)
        assert fast.served == 2
        counted = requests.get(stream.split("/v1/")[0] + "/metrics").text.splitlines()
        assert 'durable_streams_http_requests_total{method="GET",route="long_poll",status="204"} 1.0' in counted
        assert not any('status="500"' in line for line in counted)


def test_default_headers_are_rendered_once_unless_a_response_must_handle_them() -> None:
    """uvicorn's own ``date``/``server`` lines are rendered once per list; a list an embedder
    configured with a ``connection`` header or a value uvicorn would refuse is left to each
    response, which closes the connection or refuses the value as uvicorn does."""
    plain = [(b"date", b"Wed, 25 Nov 2026 05:00:00 GMT"), (b"server", b"uvicorn")]
    lines = DefaultLines()
    assert lines.render(plain) == b"date: Wed, 25 Nov 2026 05:00:00 GMT\r\nserver: uvicorn\r\n"
    assert lines.render(plain) is lines.render(plain)  # (rendered once for the same list)
    assert lines.render([*plain, (b"connection", b"close")]) is None
    assert lines.render([*plain, (b"x-note", b"a\r\nb")]) is None
    assert DefaultLines().render(plain) == lines.render(plain)  # (each server its own)
