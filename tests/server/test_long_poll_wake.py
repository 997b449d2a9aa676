"""A parked long-poll answered at its wake (``read_answers.ParkedRead``, ``DirectCycle.answer_now``).

The group commit's completion wakes the stream's readers (``Stream.wake``); on the lean path a
long-poll whose new messages are in memory is answered right there, with the bytes its task would
have written a turn later. Checked here: the same answers as the app's path (which has no
``answer_now``) for text, JSON and closing wakes, with the path taken where it should be and not
where it should not; a connection whose writes are paused is answered by the task once the client
reads; a failing ``at_wake`` still wakes its reader; ``reads.read_now`` is ``read`` where it answers.
Real servers in this process (``inprocess.serving``), real Delta tables.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import requests
from inprocess import Served, serving
from rawhttp import RawResponse, exchange, request_bytes
from servers import live_readers, wait_for
from test_lean_appends import Answer
from test_lean_appends import _answer as _any_answer

from durable_streams_server import ServerConfig
from durable_streams_server.engine.reads import wait_for_change
from durable_streams_server.engine.stream import Stream
from durable_streams_server.http.fastpath import cycle as direct
from durable_streams_server.http.fastpath.parked import ParkedRead
from durable_streams_server.http.streams import StreamHandlers

TEXT = {"Content-Type": "text/plain"}
JSON = {"Content-Type": "application/json"}


def _streams(served: Served) -> StreamHandlers:
    """The stream handlers of a served app (started: ``serving`` waits until it is)."""
    started = served.app.started
    assert started is not None
    return started.streams


def _answer(response: requests.Response) -> Answer:
    """As ``test_lean_appends`` compares answers; the creation time in ``Stream-Incarnation`` read as ``T``."""
    status, headers, body = _any_answer(response)
    return status, [(k, v.split("-")[0] + "-T" if k == "stream-incarnation" else v) for k, v in headers], body


def _until_waiting(base: str, count: int, timeout_s: float = 10.0) -> None:
    """Until exactly ``count`` long-polls wait at the server (its gauge: ``servers.live_readers``;
    a long-poll counts from the moment its read found nothing and it parked, no turn of the loop
    in between, until its answer is done)."""
    wait_for(
        lambda: live_readers(base, "long_poll") == count,
        timeout_s,
        interval_s=0.005,
        message=lambda: f"({live_readers(base, 'long_poll')} long-polls waiting, not {count})",
    )


def _parked(
    http: requests.Session,
    url: str,
    offset: str,
    headers: dict[str, str] | None = None,
    waiting: int = 0,
    **params: str,
) -> tuple[threading.Thread, list[Answer]]:
    """A long-poll from ``offset`` in a thread, once the server has it parked: its answer comes in the list.

    First until ``waiting`` long-polls wait (earlier ones that were answered count until their
    answer is done), then until this one waits too: a wake sent next finds it parked."""
    base = url.split("/v1/stream/", 1)[0]
    _until_waiting(base, waiting)
    answers: list[Answer] = []

    def poll() -> None:
        with requests.Session() as own:
            own.trust_env = False
            answers.append(
                _answer(own.get(url, params={"offset": offset, "live": "long-poll", **params}, headers=headers))
            )

    thread = threading.Thread(target=poll)
    thread.start()
    _until_waiting(base, waiting + 1)
    return thread, answers


def _woken(
    http: requests.Session,
    url: str,
    wake: tuple[str, dict[str, str], bytes],
    matching_etag: bool = False,
    **params: str,
) -> Answer:
    """Park a long-poll at the tail of ``url``, send ``wake`` (method, headers, body), return its
    answer. ``matching_etag``: the long-poll sends the ETag its answer will have (one message) as
    ``If-None-Match``."""
    head = http.head(url).headers
    tail = head["Stream-Next-Offset"]
    headers = None
    if matching_etag:
        uid = head["ETag"].strip('"').split(":")[0]
        headers = {"If-None-Match": f'"{uid}:{tail}:{int(tail.split("_")[0]) + 1:016d}_{0:016d}"'}
    thread, answers = _parked(http, url, tail, headers, **params)
    method, headers, body = wake
    assert http.request(method, url, headers=headers, data=body).status_code in (200, 204)
    thread.join(timeout=30)
    (answer,) = answers
    return answer


def _script(http: requests.Session, url: str) -> list[Answer]:
    text, json_stream, closing = (f"{url}/v1/stream/{name}" for name in ("text", "json", "closing"))
    assert http.put(text, headers=TEXT).status_code == 201
    assert http.put(json_stream, headers=JSON).status_code == 201
    assert http.put(closing, headers=TEXT).status_code == 201
    assert http.post(text, headers=TEXT, data=b"before").status_code == 204
    return [
        _woken(http, text, ("POST", TEXT, b"one")),
        _woken(http, text, ("POST", TEXT, b"two"), cursor="1"),
        _woken(http, text, ("POST", TEXT, b"three"), matching_etag=True),  # the client has it: a 304, from the task
        _woken(http, json_stream, ("POST", JSON, b'[{"a":1},[2]]')),
        _woken(http, closing, ("POST", {**TEXT, "Stream-Closed": "true"}, b"last")),
        _woken(http, text, ("POST", {**TEXT, "Stream-Closed": "true"}, b"")),  # closed, no data: the task answers
        _woken(http, json_stream, ("DELETE", {}, b"")),  # gone: the task answers
    ]


def test_a_woken_long_poll_answers_as_the_app_does(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path, long_poll_timeout_ms=10_000)
    answers: list[list[Answer]] = []
    at_wake: list[int] = []
    for index, lean in enumerate((True, False)):
        with serving(replace(config, data_dir=tmp_path / f"s{index}"), fast_path=lean) as (url, gate):
            handlers = _streams(gate)
            assert isinstance(handlers, StreamHandlers)
            with requests.Session() as http:
                http.trust_env = False
                answers.append(_script(http, url))
            at_wake.append(handlers.answered_at_wake)
    lean_answers, app_answers = answers
    assert [status for status, _, _ in lean_answers] == [200, 200, 304, 200, 200, 204, 404]
    assert [body for _, _, body in lean_answers[:5]] == [b"one", b"two", b"", b'[{"a":1},[2]]', b"last"]
    assert lean_answers == app_answers
    assert at_wake == [4, 0]  # the four with new messages; the app's path has no connection to answer on


def _exchange_into(answers: list[RawResponse], port: int, data: bytes) -> None:
    answers.append(exchange(port, data))


def test_a_woken_long_polls_head_has_the_apps_headers_in_the_apps_order(tmp_path: Path) -> None:
    """On the wire: the lean answer at the wake and the app's carry the same header lines, in the
    same order (the date, the creation time in the incarnation and the cursor's interval aside)."""
    heads: list[list[tuple[str, str]]] = []
    for index, lean in enumerate((True, False)):
        config = ServerConfig(data_dir=tmp_path / f"s{index}", long_poll_timeout_ms=10_000)
        with serving(config, fast_path=lean) as (url, gate):
            stream = f"{url}/v1/stream/ordered"
            assert requests.put(stream, headers=TEXT).status_code == 201
            tail = requests.head(stream).headers["Stream-Next-Offset"]
            target = f"/v1/stream/ordered?offset={tail}&live=long-poll".encode()
            answers: list[RawResponse] = []
            port = int(url.rsplit(":", 1)[1])
            poll = threading.Thread(target=_exchange_into, args=(answers, port, request_bytes("GET", target, [], None)))
            poll.start()
            _until_waiting(url, 1)  # (parked)
            assert requests.post(stream, headers=TEXT, data=b"ordered").status_code == 204
            poll.join(timeout=30)
            (answer,) = answers
            assert answer.status == 200 and answer.body == b"ordered"
            hidden = {"date": "", "stream-incarnation": "", "stream-cursor": ""}
            heads.append([(name, hidden.get(name, value)) for name, value in answer.headers.items()])
            if lean:  # (answered at the wake)
                assert gate.fast_path is not None
                assert _streams(gate).answered_at_wake == 1
    lean_head, app_head = heads
    assert [name for name, _ in lean_head][:6] == [
        "date",
        "server",
        "content-type",
        "stream-incarnation",
        "cache-control",
        "vary",
    ]
    assert lean_head == app_head


def test_the_core_is_yielded_after_each_answer_at_a_wake_and_only_then(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``DirectCycle.answer_now`` lets a reader woken on the server's core run first
    (``os.sched_yield``): once per long-poll answered at the wake (its reader here, on 127.0.0.1),
    never for other answers."""
    yields: list[float] = []
    real = direct._yield_cpu

    def counted() -> None:
        yields.append(time.monotonic())
        real()

    monkeypatch.setattr(direct, "_yield_cpu", counted)
    with serving(ServerConfig(data_dir=tmp_path, long_poll_timeout_ms=10_000)) as (url, gate):
        assert gate.fast_path is not None and gate.app.started is not None
        stream = f"{url}/v1/stream/yields"
        with requests.Session() as http:
            http.trust_env = False
            assert http.put(stream, headers=TEXT).status_code == 201
            assert http.post(stream, headers=TEXT, data=b"before").status_code == 204
            tail = http.head(stream).headers["Stream-Next-Offset"]
            assert http.get(stream, params={"offset": "-1"}).content == b"before"
            assert yields == []  # (a create, an append, a HEAD, a read: their own answers)
            parked = [_parked(http, stream, tail, waiting=waiting) for waiting in range(2)]
            assert http.post(stream, headers=TEXT, data=b"woken").status_code == 204
            for thread, answers in parked:
                thread.join(timeout=30)
                assert [body for _, _, body in answers] == [b"woken"]
        assert _streams(gate).answered_at_wake == 2
        assert len(yields) == 2


@pytest.mark.parametrize(
    ("client", "server", "local"),
    [
        (("127.0.0.1", 50000), ("127.0.0.1", 8080), True),
        (("192.0.2.2", 50000), ("192.0.2.2", 8080), True),  # (this machine, through its own address)
        (("::1", 50000), ("::1", 8080), True),
        (None, None, True),  # (a Unix socket)
        (("192.0.2.7", 50000), ("192.0.2.2", 8080), False),
        (("10.0.0.5", 50000), ("127.0.0.1", 8080), False),
    ],
)
def test_only_a_reader_on_this_machine_is_yielded_to(
    client: tuple[str, int] | None, server: tuple[str, int] | None, local: bool
) -> None:
    assert direct.peer_is_local(client, server) is local


def _recv_until(sock: socket.socket, count: int, marker: bytes) -> bytes:
    data = b""
    while data.count(marker) < count:
        chunk = sock.recv(1 << 20)
        assert chunk, f"closed after {len(data)} bytes"
        data += chunk
    return data


def test_a_connection_that_cannot_take_the_answer_now_gets_it_from_the_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 12 MB read the client does not read yet: more than the kernel's buffers take, so the
    connection's writes pause. The long-poll pipelined behind it parks and is woken meanwhile:
    its task answers once the client reads."""
    at_once: list[bool] = []
    """What the parked long-poll's wake said (``ParkedRead.answer``: ``False``, the task answers)."""
    real = ParkedRead.answer

    def answer(self: ParkedRead) -> bool:
        at_once.append(real(self))
        return at_once[-1]

    monkeypatch.setattr(ParkedRead, "answer", answer)
    big = b"x" * 12_000_000
    config = ServerConfig(data_dir=tmp_path, long_poll_timeout_ms=10_000, max_read_bytes=len(big))
    with serving(config) as (url, gate):
        assert gate.fast_path is not None and gate.app.started is not None
        handlers, readers = _streams(gate), gate.app.live_readers
        stream = f"{url}/v1/stream/big"
        assert requests.put(stream, headers=TEXT).status_code == 201
        tail = requests.post(stream, headers=TEXT, data=big).headers["Stream-Next-Offset"]
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=30) as sock:
            sock.sendall(
                b"GET /v1/stream/big?offset=-1 HTTP/1.1\r\nHost: x\r\n\r\n"
                b"GET /v1/stream/big?offset=%s&live=long-poll HTTP/1.1\r\nHost: x\r\n\r\n" % tail.encode()
            )
            wait_for(lambda: readers.long_poll != 0, interval_s=0.01)
            assert readers.long_poll == 1  # parked behind the big answer, which the client has not read
            assert requests.post(stream, headers=TEXT, data=b"woken").status_code == 204
            wait_for(lambda: at_once == [False], message=lambda: f"(answers at the wake: {at_once})")
            data = _recv_until(sock, 1, b"woken")
        first, _, second = data.partition(b"HTTP/1.1 200 OK")[2].partition(b"HTTP/1.1 200 OK")
        assert first.endswith(big) and second.endswith(b"woken")
        assert handlers.answered_at_wake == 0


def test_a_failing_at_wake_still_wakes_its_reader(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> bool:
        stream = Stream(name="s", uid=1, content_type="text/plain", created_ms=0)

        def broken() -> None:
            raise RuntimeError("broken")

        waiting = asyncio.ensure_future(wait_for_change(stream, 0, 10, broken))
        await asyncio.sleep(0)
        stream.visible_tail = 1
        with caplog.at_level(logging.ERROR, "durable_streams_server.engine"):
            stream.wake()
        return await asyncio.wait_for(waiting, 1)

    assert asyncio.run(scenario()) is True
    assert "answering a woken reader failed" in caplog.text
