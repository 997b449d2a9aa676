"""The benchmark's load generator (``bench/loadgen.py``): a response parser that miscounted
or misframed would make every ratio of ``bench/server_bench.py`` wrong, so it is tested on
the framings either server may use, split at every byte, and against our server."""

from __future__ import annotations

import itertools
import socket
import sys
import time
from pathlib import Path

import pytest
from servers import ServerProcess, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import loadgen

LENGTH = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n"
NO_CONTENT = b"HTTP/1.1 204 No Content\r\nStream-Next-Offset: 7\r\n\r\n"


@pytest.mark.parametrize("wire", [LENGTH, CHUNKED])
def test_a_response_is_complete_only_with_its_last_byte(wire: bytes) -> None:
    for cut in range(len(wire)):
        assert loadgen.parse(bytearray(wire[:cut])) is None, cut
    parsed = loadgen.parse(bytearray(wire + NO_CONTENT))
    assert parsed is not None
    response, used = parsed
    assert (response.status, response.body, used) == (200, b"hello", len(wire))


def test_no_body_follows_a_204_or_the_answer_to_a_head() -> None:
    parsed = loadgen.parse(bytearray(NO_CONTENT + LENGTH))
    assert parsed is not None and parsed[0].headers["stream-next-offset"] == "7" and parsed[1] == len(NO_CONTENT)
    head = LENGTH[: -len(b"hello")]
    parsed = loadgen.parse(bytearray(head + NO_CONTENT), head_only=True)
    assert parsed is not None and parsed[0].body == b"" and parsed[1] == len(head)


def test_drive_and_arrivals_against_the_server(server: ServerProcess) -> None:
    port, path, octets = server.port, "/v1/stream/loadgen", {"Content-Type": "application/octet-stream"}
    conn = loadgen.Connection(port)
    assert conn.request("PUT", path, headers=octets).status == 201
    statuses: list[int] = []
    appends = [itertools.repeat(loadgen.render("POST", path, port, b"x" * 10, octets), times) for times in (3, 0, 5)]
    assert loadgen.drive(port, appends, lambda response: statuses.append(response.status)) == 8
    assert statuses == [204] * 8
    assert (
        conn.request("HEAD", path).headers["stream-next-offset"]
        == conn.request("GET", path).headers["stream-next-offset"]
    )
    assert len(conn.request("GET", f"{path}?offset=-1").body) == 80

    poll = loadgen.Connection(port)
    tail = conn.request("HEAD", path).headers["stream-next-offset"]
    poll.send(loadgen.render("GET", f"{path}?offset={tail}&live=long-poll", port))
    sent = time.perf_counter()
    conn.send(loadgen.render("POST", path, port, b"late", octets))
    (polled_at, polled), (appended_at, appended) = loadgen.arrivals([poll, conn])
    assert (polled.status, polled.body, appended.status) == (200, b"late", 204)
    assert sent < polled_at and sent < appended_at
    assert conn.request("GET", f"{path}?offset={tail}").body == b"late"  # blocking again after arrivals
    poll.close()
    conn.close()


def test_arrivals_takes_a_response_already_read(server: ServerProcess) -> None:
    """Two pipelined requests answered in one read: the second answer is in the buffer after the
    first ``receive``, and ``arrivals`` hands it over without waiting for more bytes."""
    port, path, octets = server.port, "/v1/stream/pipelined", {"Content-Type": "application/octet-stream"}
    conn = loadgen.Connection(port)
    assert conn.request("PUT", path, b"first", octets).status == 201
    read = loadgen.render("GET", f"{path}?offset=-1", port)
    conn.send(read + read)

    def both_arrived() -> bool:  # both answers on the socket, so one recv takes both
        unread = conn._sock.recv(65536, socket.MSG_PEEK)
        return unread.count(b"HTTP/1.1 200 ") == 2 and unread.endswith(b"first")

    wait_for(both_arrived)
    assert conn.receive().body == b"first"
    ((_, second),) = loadgen.arrivals([conn], timeout_s=2)
    assert (second.status, second.body) == (200, b"first")
    conn.close()
