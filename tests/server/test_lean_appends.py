"""The lean path of small appends and creates (``http/lean.py``, ``http/direct.py``) answers exactly as the app does.

Two real servers in this process (uvicorn on 127.0.0.1, the protocol class the CLI uses,
real Delta tables): one as the CLI runs it (lean path on), one whose gate is wrapped in a
plain ASGI function, so the protocol does not find the lean path (as for an app mounted
in another one) and every request takes the app's path. The same requests, in the same order, get the
same statuses, headers (but ``date``; each server's own URL in ``Location`` read as ``URL``)
and bodies from both, the same request counts in ``/metrics``, and the lean path served the
first server's eligible requests and nothing else.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import requests
from inprocess import serving
from starlette.types import ASGIApp, Receive, Scope, Send

from durable_streams_server import ServerConfig
from durable_streams_server.protocol.tokens import parse_tokens

TEXT = {"Content-Type": "text/plain"}
Answer = tuple[int, list[tuple[str, str]], bytes]


class _Counting:
    """A user's middleware (it has an ``app``, as Starlette's do): sees every request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.posts = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.posts += scope.get("method") == "POST"
        await self.app(scope, receive, send)


def _answer(response: requests.Response) -> Answer:
    base = response.url.split("/v1/", 1)[0]
    headers = sorted(
        (name.lower(), value.replace(base, "URL")) for name, value in response.headers.items() if name.lower() != "date"
    )
    return response.status_code, headers, response.content


def _both(config: ServerConfig, script: Callable[[requests.Session, str], list[Answer]]) -> tuple[list[Answer], int]:
    """The script's answers from a lean server and from an app-only one (they must agree),
    and how many requests the lean path served."""
    answers = []
    served = []
    for index, lean in enumerate((True, False)):
        data = replace(config, data_dir=config.data_dir / f"server{index}")
        with serving(data, lean=lean) as (url, gate), requests.Session() as http:
            http.trust_env = False
            assert gate.lean is not None
            answers.append(script(http, url))
            served.append(gate.lean.served)
            counted = [line for line in http.get(f"{url}/metrics").text.splitlines() if "_requests_total{" in line]
            answers[-1].append((0, [("metrics", line) for line in counted], b""))
    assert served[1] == 0, "a wrapped gate keeps every request on the app's path"
    assert answers[0] == answers[1]  # (the last: the request counts of /metrics)
    return answers[0][:-1], served[0]


def _appends(http: requests.Session, url: str) -> list[Answer]:
    stream, closed = f"{url}/v1/stream/a", f"{url}/v1/stream/closed"
    for target in (stream, closed):
        assert http.put(target, headers=TEXT).status_code == 201
    producer = {**TEXT, "Producer-Id": "p", "Producer-Epoch": "0"}
    posts: list[tuple[str, dict[str, str], bytes]] = [
        (stream, TEXT, b"hello"),
        (stream, {**producer, "Producer-Seq": "0"}, b"one"),
        (stream, {**producer, "Producer-Seq": "0"}, b"one"),  # a retry: duplicate
        (stream, {**producer, "Producer-Seq": "5"}, b"gap"),  # 409: a sequence gap
        (stream, {"Producer-Id": "p", "Producer-Epoch": "0"}, b"x"),  # 400: a producer header missing
        (stream, {**TEXT, "Stream-Seq": "b"}, b"b"),
        (stream, {**TEXT, "Stream-Seq": "a"}, b"a"),  # 409: Stream-Seq goes back
        (stream, {}, b"no type"),  # 400
        (stream, TEXT, b""),  # 400: empty
        (stream, {"Content-Type": "application/json"}, b"{}"),  # 409: another content type
        (f"{url}/v1/stream/missing", TEXT, b"x"),  # 404
        (stream, TEXT, b"x" * 3000),  # 413 (max_body_bytes 2048)
        (closed, {**TEXT, "Stream-Closed": "true"}, b""),  # closes
        (closed, TEXT, b"late"),  # 409: closed
    ]
    answers = [_answer(http.post(target, headers=headers, data=body)) for target, headers, body in posts]
    stored = http.get(stream, params={"offset": "-1"})
    return [*answers, (stored.status_code, [], stored.content)]  # (its ETag names the incarnation)


def test_appends_answer_as_the_app_does_and_take_the_lean_path(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path, max_body_bytes=2048, flush_interval_ms=50)
    answers, served = _both(config, _appends)
    statuses = [status for status, _, _ in answers]
    assert statuses == [204, 200, 204, 409, 400, 204, 409, 400, 400, 409, 404, 413, 204, 409, 200]
    assert answers[-1][2] == b"hello" + b"one" + b"b"  # what the appends stored
    assert served == 16  # the two PUTs and every POST (small, plain) went the lean way


def _creates(http: requests.Session, url: str) -> list[Answer]:
    base = f"{url}/v1/stream"
    source = f"{base}/source"
    puts: list[tuple[str, dict[str, str], bytes]] = [
        (source, TEXT, b"first"),  # 201, with a body
        (source, TEXT, b""),  # 200: the same again
        (source, {"Content-Type": "application/json"}, b""),  # 409: another content type
        (f"{base}/ttl", {**TEXT, "Stream-TTL": "60", "Stream-Expires-At": "2030-01-01T00:00:00Z"}, b""),  # 400
        (f"{base}/bad-ttl", {**TEXT, "Stream-TTL": "soon"}, b""),  # 400
        (f"{base}/ttl", {**TEXT, "Stream-TTL": "3600"}, b""),  # 201
        (f"{base}/closed", {**TEXT, "Stream-Closed": "true"}, b"last"),  # 201, closed
        (f"{base}/fork", {**TEXT, "Stream-Forked-From": "/v1/stream/source"}, b""),  # 201
        (f"{base}/orphan", {**TEXT, "Stream-Forked-From": "/v1/stream/missing"}, b""),  # 404
        (f"{base}/odd", {**TEXT, "Stream-Fork-Offset": "0000000000000000_0000000000000000"}, b""),  # 400
        (f"{base}/json", {"Content-Type": "application/json"}, b"[1,2]"),  # 201
        (f"{base}/big", TEXT, b"x" * 3000),  # 413
    ]
    answers = [_answer(http.put(target, headers=headers, data=body)) for target, headers, body in puts]
    forked = http.get(f"{base}/fork", params={"offset": "-1"})
    return [*answers, (forked.status_code, [], forked.content)]


def test_creates_answer_as_the_app_does_and_take_the_lean_path(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path, max_body_bytes=2048, flush_interval_ms=50)
    answers, served = _both(config, _creates)
    statuses = [status for status, _, _ in answers]
    assert statuses == [201, 200, 409, 400, 400, 201, 201, 201, 404, 400, 201, 413, 200]
    assert ("location", "URL/v1/stream/source") in answers[0][1]
    assert answers[-1][2] == b"first"  # the fork holds its source's message
    assert served == 12


def _refusals(http: requests.Session, url: str) -> list[Answer]:
    stream = f"{url}/v1/stream/guarded"
    writer = {"Authorization": "Bearer writer-token-0123456789"}
    reader = {"Authorization": "Bearer reader-token-0123456789"}
    assert http.put(stream, headers={**TEXT, **writer}).status_code == 201
    return [
        _answer(http.post(stream, headers=TEXT, data=b"anonymous")),  # 401
        _answer(http.post(stream, headers={**TEXT, **reader}, data=b"reader")),  # 403
        _answer(http.post(stream, headers={**TEXT, **writer}, data=b"writer")),  # 204
        _answer(http.post(stream, headers={**TEXT, **writer}, data=b"too fast")),  # 429
    ]


def test_auth_and_rate_limits_answer_as_the_app_does(tmp_path: Path) -> None:
    tokens = parse_tokens(
        '[{"name": "w", "token": "writer-token-0123456789", "scope": "write"},'
        ' {"name": "r", "token": "reader-token-0123456789", "scope": "read"}]',
        "test",
    )
    config = ServerConfig(data_dir=tmp_path, auth=tokens, rate_limit_rps=0.01, rate_limit_burst=2)
    answers, served = _both(config, _refusals)
    assert [status for status, _, _ in answers] == [401, 403, 204, 429]
    assert served == 5  # (and the PUT)


def test_other_requests_stay_on_the_apps_path(tmp_path: Path) -> None:
    with serving(ServerConfig(data_dir=tmp_path)) as (url, gate), requests.Session() as http:
        http.trust_env = False
        assert gate.lean is not None
        stream = f"{url}/v1/stream/s"
        assert http.put(stream, headers=TEXT).status_code == 201
        before = gate.lean.served
        chunked = http.post(stream, headers=TEXT, data=iter([b"chunk", b"ed"]))  # no Content-Length
        forwarded = http.post(stream, headers={**TEXT, "X-Forwarded-For": "10.0.0.1"}, data=b"f")
        large = http.post(stream, headers=TEXT, data=b"L" * (64 * 1024 + 1))
        sub_resource = http.post(f"{stream}/snapshot", headers=TEXT, data=b"s")
        assert [r.status_code for r in (chunked, forwarded, large)] == [204, 204, 204]
        assert sub_resource.status_code == 405
        assert gate.lean.served == before
        assert http.post(stream, headers=TEXT, data=b"!").status_code == 204
        assert gate.lean.served == before + 1
        assert http.get(stream, params={"offset": "-1"}).content == b"chunkedf" + b"L" * (64 * 1024 + 1) + b"!"


def _read_responses(sock: socket.socket, count: int) -> list[bytes]:
    """The heads (status line and headers) of ``count`` bodiless responses on a socket."""
    data = b""
    while data.count(b"\r\n\r\n") < count:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    return data.split(b"\r\n\r\n")[:count]


def test_pipelined_requests_are_answered_in_order(tmp_path: Path) -> None:
    """Three POSTs in one write (the last one not lean: chunked): three answers, in order,
    each with its own offset."""
    with serving(ServerConfig(data_dir=tmp_path)) as (url, gate):
        assert requests.put(f"{url}/v1/stream/p", headers=TEXT).status_code == 201
        port = int(url.rsplit(":", 1)[1])

        def post(body: bytes) -> bytes:
            return (
                b"POST /v1/stream/p HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
                % (
                    len(body),
                    body,
                )
            )

        chunked = b"POST /v1/stream/p HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
        chunked += b"Transfer-Encoding: chunked\r\n\r\n3\r\nccc\r\n0\r\n\r\n"
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(post(b"a") + post(b"bb") + chunked)
            heads = _read_responses(sock, 3)
        offsets = [
            line.split(b": ", 1)[1]
            for head in heads
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"stream-next-offset")
        ]
        assert [head.split(b"\r\n", 1)[0] for head in heads] == [b"HTTP/1.1 204 No Content"] * 3
        assert offsets == [b"%016d_0000000000000000" % n for n in (1, 2, 3)]
        assert requests.get(f"{url}/v1/stream/p", params={"offset": "-1"}).content == b"abbccc"
        assert gate.lean is not None and gate.lean.served == 3  # (and the PUT)


def test_a_users_middleware_sees_every_append(tmp_path: Path) -> None:
    """The lean path is found behind uvicorn's proxy-headers middleware only: a gate in a
    user's middleware gets no lean path, so the middleware sees every request."""
    counting: list[_Counting] = []

    def wrap(app: ASGIApp) -> ASGIApp:
        counting.append(_Counting(app))
        return counting[0]

    with serving(ServerConfig(data_dir=tmp_path), wrap=wrap) as (url, gate), requests.Session() as http:
        http.trust_env = False
        stream = f"{url}/v1/stream/w"
        assert http.put(stream, headers=TEXT).status_code == 201
        for body in (b"a", b"b", b"c"):
            assert http.post(stream, headers=TEXT, data=body).status_code == 204
        assert gate.lean is not None and gate.lean.served == 0
        assert counting[0].posts == 3
