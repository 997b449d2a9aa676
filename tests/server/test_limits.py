"""Operator limits against a real server on loopback: oversized heads (431), slow bodies
(408), idle and dribbling connections (closed), full buckets (409), too many live readers
(503 + Retry-After), per-client rate limits (429 + Retry-After) and uvicorn's connection
cap. Every refusal carries the JSON error body (uvicorn's own refusals excepted, which
happen before the app sees a request) and stores nothing.

(Bodies over --max-body-bytes, with and without Content-Length, are in test_bad_input.)
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import h11
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from rawhttp import RawResponse, connection_closed_by_server, exchange, request_bytes
from security_support import bearer, new_token, write_tokens
from servers import ServerProcess, session, wait_for

TEXT = {"Content-Type": "text/plain"}
MAX_HEADER_BYTES = 2048
TIMEOUT_S = 1
STREAMS_PER_BUCKET = 3
LIVE_READERS = 2
HEAD_LIMITS = (
    *("--max-header-bytes", str(MAX_HEADER_BYTES)),
    *("--request-timeout-s", str(TIMEOUT_S)),
    *("--keep-alive-timeout-s", str(TIMEOUT_S)),
)


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server with small limits for the tests that do not change every request's fate."""
    directory = tmp_path_factory.mktemp("limits")
    args = [
        *HEAD_LIMITS,
        "--max-streams-per-bucket",
        str(STREAMS_PER_BUCKET),
        "--max-live-readers",
        str(LIVE_READERS),
        "--long-poll-timeout-ms",
        "20000",
        "--sse-reconnect-ms",
        "20000",
    ]
    server = ServerProcess(directory / "data", args).start()
    yield server
    server.kill()


@pytest.fixture(
    scope="module",
    params=[("httptools", "on"), ("httptools", "off"), ("h11", "on")],
    ids=["httptools", "httptools-fast-path-off", "h11"],
)
def guarded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with small head limits, once per HTTP parser and with httptools also without the
    fast path: the head guards are not the fast path's, every protocol must enforce them."""
    parser, fast_path = request.param
    directory = tmp_path_factory.mktemp(f"heads-{parser}-{fast_path}")
    args = ["--http-parser", parser, "--fast-path", fast_path, *HEAD_LIMITS]
    server = ServerProcess(directory / "data", args).start()
    yield server
    server.kill()


def parser_of(server: ServerProcess) -> str:
    return server.extra_args[server.extra_args.index("--http-parser") + 1]


@pytest.fixture
def http() -> Iterator[requests.Session]:
    """Each request on a connection of its own: these servers close a keep-alive connection idle for
    ``TIMEOUT_S``, and a pooled one reused at that moment (after a slow request's second) meets the
    server's close as a reset, which ``requests`` does not retry."""
    with session() as s:
        s.headers["Connection"] = "close"
        yield s


def new_stream(http: requests.Session, server: ServerProcess, body: bytes = b"seed") -> str:
    url = server.stream_url(f"limits-{uuid.uuid4().hex}")
    assert http.put(url, headers=TEXT, data=body).status_code == 201
    return url


def contents(http: requests.Session, url: str) -> tuple[int, bytes, str | None]:
    response = http.get(url, params={"offset": "-1"})
    return response.status_code, response.content, response.headers.get("Stream-Next-Offset")


def path_of(url: str) -> bytes:
    return urlsplit(url).path.encode()


# -- header size --------------------------------------------------------------------------


def test_oversized_head_gets_431_and_creates_nothing(guarded: ServerProcess, http: requests.Session) -> None:
    url = guarded.stream_url(f"big-head-{uuid.uuid4().hex}")
    head = [(b"Content-Type", b"text/plain"), (b"X-Padding", b"p" * MAX_HEADER_BYTES)]
    response = exchange(guarded.port, request_bytes("PUT", path_of(url), head, b"data"), "PUT")
    assert response.status == 431
    assert response.json_error()["code"] == "HEADERS_TOO_LARGE"
    assert http.head(url).status_code == 404
    # just under the limit is fine
    small = [(b"Content-Type", b"text/plain"), (b"X-Padding", b"p" * (MAX_HEADER_BYTES // 2))]
    assert exchange(guarded.port, request_bytes("PUT", path_of(url), small, b"data"), "PUT").status == 201


def test_oversized_query_counts_as_head(guarded: ServerProcess, http: requests.Session) -> None:
    url = new_stream(http, guarded)
    target = path_of(url) + b"?offset=-1&junk=" + b"j" * MAX_HEADER_BYTES
    response = exchange(guarded.port, request_bytes("GET", target, [], None))
    assert response.status == 431, response


@pytest.mark.parametrize("pieces", [1, 8], ids=["one-write", "eight-writes"])
def test_incomplete_oversized_head_is_refused_by_the_protocol(guarded: ServerProcess, pieces: int) -> None:
    """A head still incomplete beyond the limit never reaches the app, so buffering it
    cannot exhaust memory: h11 gives up on it (uvicorn's plain-text 400), the httptools
    protocol counts what it fed its parser (431 with the JSON error body); both close."""
    head = b"GET /v1/stream/x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"p" * (MAX_HEADER_BYTES + 100)
    step = -(-len(head) // pieces)
    with socket.create_connection(("127.0.0.1", guarded.port)) as sock:
        for start in range(0, len(head), step):
            sock.sendall(head[start : start + step])
            time.sleep(0.02)  # separate reads on the server (not a timing assertion)
        sock.settimeout(10)
        answer = sock.recv(65536)
        expected = b"HTTP/1.1 400 " if parser_of(guarded) == "h11" else b"HTTP/1.1 431 "
        assert answer.startswith(expected), answer
        assert connection_closed_by_server(sock, within_s=10)


def test_a_complete_head_then_a_body_is_not_counted_as_head(guarded: ServerProcess, http: requests.Session) -> None:
    """Only head bytes count: a body many times the head limit, sent in pieces, is stored."""
    url = new_stream(http, guarded, b"")
    body = b"b" * (MAX_HEADER_BYTES * 8)
    head = request_bytes("POST", path_of(url), [(b"Content-Type", b"text/plain")], body)[: -len(body)]
    with socket.create_connection(("127.0.0.1", guarded.port)) as sock:
        sock.sendall(head)
        for start in range(0, len(body), 1024):
            sock.sendall(body[start : start + 1024])
        sock.settimeout(10)
        assert sock.recv(65536).startswith(b"HTTP/1.1 204 ")
    assert contents(http, url)[1] == body


# -- slow and idle clients ----------------------------------------------------------------


def slow_request(server: ServerProcess, method: str, url: str, declared: int, sent: bytes) -> RawResponse:
    """Declare ``declared`` body bytes, send only ``sent``, and wait for the server's answer."""
    head = request_bytes(method, path_of(url), [(b"Content-Type", b"text/plain")], None)
    head = head.replace(b"Connection: close\r\n", b"Content-Length: %d\r\nConnection: close\r\n" % declared)
    return exchange(server.port, head + sent, method, timeout_s=TIMEOUT_S * 20)


def test_a_body_that_does_not_arrive_in_time_gets_408_and_stores_nothing(
    guarded: ServerProcess, http: requests.Session
) -> None:
    url = new_stream(http, guarded)
    before = contents(http, url)
    response = slow_request(guarded, "POST", url, declared=100, sent=b"only part of it")
    assert response.status == 408
    assert response.json_error()["code"] == "REQUEST_TIMEOUT"
    assert response.headers.get("connection") == "close"
    assert contents(http, url) == before

    fresh = guarded.stream_url(f"slow-create-{uuid.uuid4().hex}")
    assert slow_request(guarded, "PUT", fresh, declared=100, sent=b"part").status == 408
    assert http.head(fresh).status_code == 404


def test_a_connection_that_never_sends_a_request_is_closed(guarded: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", guarded.port)) as sock:
        assert connection_closed_by_server(sock, within_s=TIMEOUT_S * 20)


def test_a_dribbled_head_is_cut_off(guarded: ServerProcess) -> None:
    """One byte every 100 ms keeps uvicorn's idle timer from ever firing; the head deadline
    closes the connection anyway, long before the head could be complete."""
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"s" * 400 + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", guarded.port)) as sock:
        sent = 0
        try:
            for byte in head:
                sock.sendall(bytes([byte]))
                sent += 1
                time.sleep(0.1)  # (one byte every 100 ms: the dribble's pace is the scenario)
        except OSError:
            pass  # closed under us: expected
        assert sent < len(head), "the server waited for the whole dribbled head"
        assert connection_closed_by_server(sock, within_s=TIMEOUT_S * 20)


def test_an_idle_keep_alive_connection_is_closed(guarded: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", guarded.port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        sock.settimeout(10)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        assert connection_closed_by_server(sock, within_s=TIMEOUT_S * 20)


def test_a_connection_in_use_outlives_both_deadlines(guarded: ServerProcess, http: requests.Session) -> None:
    """Requests every 0.3 s for 2.5 times the head and keep-alive timeouts: each response
    moves both deadlines on (the timer that fires at an old one is scheduled again, not
    obeyed), so the connection stays open and every request is answered."""
    url = new_stream(http, guarded)
    requests_ = [("GET", "/healthz"), ("HEAD", path_of(url).decode())]  # (through the app; the lean path)
    client = h11.Connection(h11.CLIENT)
    with socket.create_connection(("127.0.0.1", guarded.port)) as sock:
        sock.settimeout(10)
        started = time.monotonic()
        answered = 0
        while time.monotonic() - started < TIMEOUT_S * 2.5:
            method, target = requests_[answered % 2]
            sock.sendall(client.send(h11.Request(method=method, target=target, headers=[("Host", "127.0.0.1")])))
            sock.sendall(client.send(h11.EndOfMessage()) or b"")
            status = 0
            while not isinstance(event := client.next_event(), h11.EndOfMessage):
                if event is h11.NEED_DATA:
                    client.receive_data(sock.recv(65536))
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.ConnectionClosed):
                    raise AssertionError(f"closed after {answered} requests")
            assert status == 200
            client.start_next_cycle()
            answered += 1
            time.sleep(0.3)  # (a request every 0.3 s: the pace is the scenario)
        assert answered >= 8
        assert connection_closed_by_server(sock, within_s=TIMEOUT_S * 20)  # (once idle)


# -- streams per bucket -------------------------------------------------------------------


def test_a_full_bucket_refuses_new_streams_with_409(limited: ServerProcess, http: requests.Session) -> None:
    bucket = f"full-{uuid.uuid4().hex[:8]}"
    assert http.put(f"{limited.url}/{bucket}").status_code == 201
    urls = [f"{limited.url}/{bucket}/s{i}" for i in range(STREAMS_PER_BUCKET)]
    for url in urls:
        assert http.put(url, headers=TEXT).status_code == 201

    extra = f"{limited.url}/{bucket}/one-too-many"
    response = http.put(extra, headers=TEXT, data=b"x")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "BUCKET_FULL"
    assert http.head(extra).status_code == 404
    assert http.get(f"{limited.url}/{bucket}").json()["streams"] == STREAMS_PER_BUCKET
    assert http.put(urls[0], headers=TEXT).status_code == 200  # an idempotent re-create still works
    fork = http.put(extra, headers={**TEXT, "Stream-Forked-From": f"/{bucket}/s0"})
    assert fork.status_code == 409  # forks count too

    assert http.delete(urls[1]).status_code == 204
    assert http.put(extra, headers=TEXT).status_code == 201


# -- live readers -------------------------------------------------------------------------


def live_counts(server: ServerProcess) -> dict[str, float]:
    text = session().get(f"{server.url}/metrics").text
    return {
        sample.labels["mode"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "durable_streams_live_readers"
        for sample in family.samples
    }


def test_live_readers_over_the_cap_get_503_with_retry_after(limited: ServerProcess, http: requests.Session) -> None:
    url = new_stream(http, limited)
    tail = http.head(url).headers["Stream-Next-Offset"]
    answers: list[int] = []

    def long_poll() -> None:
        answers.append(session().get(url, params={"offset": tail, "live": "long-poll"}, timeout=60).status_code)

    waiter = threading.Thread(target=long_poll)
    waiter.start()
    sse = session().get(url, params={"offset": tail, "live": "sse"}, stream=True, timeout=60)
    try:
        assert sse.status_code == 200
        wait_for(lambda: live_counts(limited) == {"long_poll": 1.0, "sse": 1.0})

        for live in ("long-poll", "sse"):
            refused = http.get(url, params={"offset": tail, "live": live})
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == "TOO_MANY_LIVE_READERS"
            assert int(refused.headers["Retry-After"]) >= 1
        # reads that do not wait are not live readers
        assert http.get(url, params={"offset": "-1"}).status_code == 200
        assert http.get(url, params={"offset": "-1", "live": "long-poll"}).status_code == 200
    finally:
        sse.close()
        assert http.post(url, headers=TEXT, data=b"wake").status_code == 204
        waiter.join(timeout=30)
    assert answers == [200]
    wait_for(lambda: live_counts(limited) == {"long_poll": 0.0, "sse": 0.0})
    tail = http.head(url).headers["Stream-Next-Offset"]
    thread = threading.Thread(target=long_poll)
    thread.start()
    wait_for(lambda: live_counts(limited)["long_poll"] == 1.0)
    assert http.post(url, headers=TEXT, data=b"again").status_code == 204
    thread.join(timeout=30)
    assert answers == [200, 200]


# -- rate limits --------------------------------------------------------------------------


def test_rate_limit_answers_429_with_retry_after_and_stores_nothing(
    server_factory: Callable[..., ServerProcess], http: requests.Session
) -> None:
    server = server_factory("--rate-limit-rps", "0.2", "--rate-limit-burst", "3")
    url = server.stream_url("rated")
    assert http.put(url, headers=TEXT, data=b"first").status_code == 201
    assert http.post(url, headers=TEXT, data=b"second").status_code == 204
    before = http.get(url, params={"offset": "-1"})
    assert before.status_code == 200  # the burst of 3 is spent

    refused = http.post(url, headers=TEXT, data=b"third")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "RATE_LIMITED"
    assert 1 <= int(refused.headers["Retry-After"]) <= 5
    assert http.get(f"{server.url}/healthz").status_code == 200  # probes are never limited
    metrics = http.get(f"{server.url}/metrics")
    assert metrics.status_code == 200
    assert 'durable_streams_http_requests_total{method="POST",route="unrouted",status="429"} 1.0' in metrics.text

    answers: list[requests.Response] = []

    def refilled() -> bool:  # (refusals cost nothing: the budget refills meanwhile, a request every 5 s)
        answers.append(http.get(url, params={"offset": "-1"}))
        return answers[-1].status_code != 429

    wait_for(refilled, timeout_s=10, interval_s=0.5, message=lambda: f"({len(answers)} reads refused)")
    after = answers[-1]
    assert (after.status_code, after.content) == (200, before.content)


def test_rate_limits_are_per_token(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> None:
    tokens = {name: new_token(name) for name in ("alice", "bob")}
    grants = [{"name": name, "token": token, "scope": "admin"} for name, token in tokens.items()]
    tokens_file = write_tokens(tmp_path / "tokens.json", grants)
    server = server_factory(
        "--auth-tokens-file", str(tokens_file), "--rate-limit-rps", "0.1", "--rate-limit-burst", "2"
    )
    alice, bob = session(), session()
    alice.headers.update(bearer(tokens["alice"]))
    bob.headers.update(bearer(tokens["bob"]))
    url = server.stream_url("shared")
    assert alice.put(url, headers=TEXT).status_code == 201
    assert alice.head(url).status_code == 200
    assert alice.head(url).status_code == 429
    assert bob.head(url).status_code == 200  # same address, another token: its own budget
    assert bob.head(url).status_code == 200
    assert bob.head(url).status_code == 429
    assert session().head(url).status_code == 401  # auth answers first


# -- connections --------------------------------------------------------------------------


def test_connections_over_max_connections_get_503(server_factory: Callable[..., ServerProcess]) -> None:
    """uvicorn enforces --max-connections itself (its plain-text 503, before the app); idle
    keep-alive connections count, so --keep-alive-timeout-s bounds how long they hold a slot."""
    server = server_factory("--max-connections", "2", "--keep-alive-timeout-s", "60")
    held = []
    try:
        for _ in range(2):
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            sock.settimeout(10)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            held.append(sock)  # kept open: keep-alive
        assert exchange(server.port, request_bytes("GET", b"/healthz", [], None)).status == 503
    finally:
        for sock in held:
            sock.close()
    wait_for(lambda: exchange(server.port, request_bytes("GET", b"/healthz", [], None)).status == 200)
