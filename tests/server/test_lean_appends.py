"""The fast path (``http/fastpath/``) answers exactly as the app does.

Two real servers in this process (uvicorn on 127.0.0.1, the protocol class the CLI uses,
real Delta tables): one as the CLI runs it (``--fast-path on``), one with ``--fast-path off``,
where every request takes uvicorn's request cycle and the ASGI app. The same requests, in the
same order, get the same statuses, headers (but ``date``; each server's own URL in ``Location``
read as ``URL``) and bodies from both, the same request counts in ``/metrics``, and the fast
path served the first server's eligible requests and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import requests
from inprocess import serving
from starlette.types import ASGIApp, Receive, Scope, Send

from durable_streams_server import ServerConfig
from durable_streams_server.http.read_plans import READ_PLAN
from durable_streams_server.protocol.cursor import current_interval
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
    """A response as compared: the server's URL read as ``URL``, without ``Date``, and a live
    read's ``Stream-Cursor`` (a number of 20 s intervals of the clock, so the two servers, run
    one after the other, may be an interval apart) read as ``interval`` once checked to be one."""
    base = response.url.split("/v1/", 1)[0]
    headers = sorted(
        (name.lower(), value.replace(base, "URL")) for name, value in response.headers.items() if name.lower() != "date"
    )
    for index, (name, value) in enumerate(headers):
        if name == "stream-cursor":
            assert value.isdigit() and abs(int(value) - current_interval(time.time())) <= 1, value
            headers[index] = (name, "interval")
    return response.status_code, headers, response.content


def _both(config: ServerConfig, script: Callable[[requests.Session, str], list[Answer]]) -> tuple[list[Answer], int]:
    """The script's answers from a server with the fast path and from one without (they must
    agree), and how many requests the fast path served."""
    answers = []
    served = []
    for index, fast in enumerate((True, False)):
        data = replace(config, data_dir=config.data_dir / f"server{index}")
        with serving(data, fast_path=fast) as (url, server), requests.Session() as http:
            http.trust_env = False
            answers.append(script(http, url))
            served.append(server.fast_path.served if server.fast_path is not None else 0)
            counted = [line for line in http.get(f"{url}/metrics").text.splitlines() if "_requests_total{" in line]
            answers[-1].append((0, [("metrics", line) for line in counted], b""))
    assert served[1] == 0, "without the fast path every request takes the app's path"
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


def test_appends_answer_as_the_app_does_and_take_the_fast_path(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path, max_body_bytes=2048, flush_interval_ms=50)
    answers, served = _both(config, _appends)
    statuses = [status for status, _, _ in answers]
    assert statuses == [204, 200, 204, 409, 400, 204, 409, 400, 400, 409, 404, 413, 204, 409, 200]
    assert answers[-1][2] == b"hello" + b"one" + b"b"  # what the appends stored
    assert served == 17  # the two PUTs, every POST (small, plain) and the GET took the fast path


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


def test_creates_answer_as_the_app_does_and_take_the_fast_path(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path, max_body_bytes=2048, flush_interval_ms=50)
    answers, served = _both(config, _creates)
    statuses = [status for status, _, _ in answers]
    assert statuses == [201, 200, 409, 400, 400, 201, 201, 201, 404, 400, 201, 413, 200]
    assert ("location", "URL/v1/stream/source") in answers[0][1]
    assert answers[-1][2] == b"first"  # the fork holds its source's message
    assert served == 13  # (and the GET)


_READ_HEADERS_THAT_DIFFER = {"date", "etag", "stream-cursor", "stream-incarnation"}
"""(the ETag and incarnation name a server's own stream ids; the cursor follows the clock)"""


def _read_answer(response: requests.Response) -> Answer:
    """The answer, but what differs between two servers (an Arrow body: its rows but the
    append times; a length: of that body)."""
    skip = _READ_HEADERS_THAT_DIFFER
    body = response.content
    if response.headers.get("content-type") == "application/vnd.apache.arrow.stream":
        table = pa.ipc.open_stream(body).read_all()
        body = repr(table.drop_columns(["ts"]).to_pylist()).encode()
        skip = skip | {"content-length"}
    headers = [(name, value) for name, value in response.headers.items() if name.lower() not in skip]
    return response.status_code, sorted(headers), body


def _reads(http: requests.Session, url: str) -> list[Answer]:
    text, json_stream, missing = f"{url}/v1/stream/r", f"{url}/v1/stream/j", f"{url}/v1/stream/missing"
    assert http.put(text, headers=TEXT).status_code == 201
    assert http.put(json_stream, headers={"Content-Type": "application/json"}, data=b"[1, {}]").status_code == 201
    tail = ""
    for body in (b"a", b"bb"):
        tail = http.post(text, headers=TEXT, data=body).headers["Stream-Next-Offset"]
    first = http.get(text, params={"offset": "-1"})
    gets: list[tuple[str, dict[str, str], dict[str, str]]] = [
        (text, {"offset": "-1"}, {}),
        (text, {"offset": "now"}, {}),
        (text, {"offset": tail}, {}),  # up to date, empty
        (text, {"offset": "-1", "live": "long-poll"}, {}),  # data at once
        (text, {"offset": tail, "live": "long-poll"}, {}),  # 204 after the long-poll timeout
        (text, {"offset": "-1"}, {"If-None-Match": first.headers["ETag"]}),  # 304
        (text, {"offset": "-1"}, {"Accept": "application/vnd.apache.arrow.stream"}),
        (json_stream, {"offset": "-1"}, {}),
        (text, {"offset": "bogus"}, {}),  # 400
        (text, {"offset": "-1", "live": "bogus"}, {}),  # 400
        (text, {"live": "long-poll"}, {}),  # 400: no offset
        (missing, {"offset": "-1"}, {}),  # 404
    ]
    answers = [_read_answer(http.get(target, params=params, headers=headers)) for target, params, headers in gets]
    return [*answers, *(_read_answer(http.head(target)) for target in (text, json_stream, missing))]


def test_reads_answer_as_the_app_does_and_take_the_fast_path(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path, long_poll_timeout_ms=300)
    answers, served = _both(config, _reads)
    statuses = [status for status, _, _ in answers]
    assert statuses == [200, 200, 200, 200, 204, 304, 200, 200, 400, 400, 400, 404, 200, 200, 404]
    assert answers[0][2] == b"abb" and answers[7][2] == b"[1,{}]"
    assert ("content-length", "0") in answers[-3][1]  # HEAD: the length of no body
    assert served == 2 + 2 + 1 + 12 + 3  # creates, appends, the first GET, the reads, the HEADs


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
    with serving(ServerConfig(data_dir=tmp_path)) as (url, server), requests.Session() as http:
        http.trust_env = False
        assert server.fast_path is not None
        stream = f"{url}/v1/stream/s"
        assert http.put(stream, headers=TEXT).status_code == 201
        before = server.fast_path.served
        chunked = http.post(stream, headers=TEXT, data=iter([b"chunk", b"ed"]))  # no Content-Length
        large = http.post(stream, headers=TEXT, data=b"L" * (64 * 1024 + 1))
        sub_resource = http.post(f"{stream}/snapshot", headers=TEXT, data=b"s")
        assert [r.status_code for r in (chunked, large)] == [204, 204]
        assert sub_resource.status_code == 405
        with http.get(stream, params={"offset": "-1", "live": "sse"}, stream=True) as sse:
            assert sse.status_code == 200 and sse.headers["Content-Type"].startswith("text/event-stream")
        plan = http.get(stream, params={"offset": "-1"}, headers={"Accept": READ_PLAN})
        assert plan.status_code == 200 and plan.headers["Content-Type"] == READ_PLAN
        with_body = http.get(stream, params={"offset": "-1"}, data=b"?")
        assert with_body.status_code == 200
        assert server.fast_path.served == before
        assert http.post(stream, headers=TEXT, data=b"!").status_code == 204
        assert server.fast_path.served == before + 1
        assert http.get(stream, params={"offset": "-1"}).content == b"chunked" + b"L" * (64 * 1024 + 1) + b"!"


def test_a_users_middleware_sees_every_append(tmp_path: Path) -> None:
    """The fast path stands in for the app uvicorn runs, alone or behind uvicorn's proxy-headers
    middleware only: an app in a user's middleware gets none, so the middleware sees every request."""
    counting: list[_Counting] = []

    def wrap(app: ASGIApp) -> ASGIApp:
        counting.append(_Counting(app))
        return counting[0]

    with serving(ServerConfig(data_dir=tmp_path), wrap=wrap) as (url, server), requests.Session() as http:
        http.trust_env = False
        stream = f"{url}/v1/stream/w"
        assert http.put(stream, headers=TEXT).status_code == 201
        for body in (b"a", b"b", b"c"):
            assert http.post(stream, headers=TEXT, data=body).status_code == 204
        assert server.fast_path is not None and server.fast_path.served == 0
        assert counting[0].posts == 3


def test_the_stream_targets_are_remembered_per_path_and_stay_the_same(tmp_path: Path) -> None:
    """``stream_target`` remembers its answer per path: asked again, a stream's path, a
    sub-resource's, a path with a '..' segment and one that is not UTF-8 get the same answers
    (the last two: the app's 400 each time, nothing stored), and many paths do not grow the
    memory past its bound."""
    with serving(ServerConfig(data_dir=tmp_path)) as (url, server), requests.Session() as http:
        http.trust_env = False
        assert server.fast_path is not None
        app = server.fast_path.app
        stream = f"{url}/v1/stream/s"
        assert http.put(stream, headers=TEXT).status_code == 201
        for _ in range(2):
            before = server.fast_path.served
            assert http.post(stream, headers=TEXT, data=b"x").status_code == 204
            assert http.post(f"{stream}/snapshot", headers=TEXT, data=b"s").status_code == 405
            for bad in ("/v1/stream/s/%2E%2E/t", "/v1/stream/%FF"):
                refused = http.post(f"{url}{bad}", headers=TEXT, data=b"b")
                assert refused.status_code == 400 and refused.json()["error"]["code"].startswith("INVALID_")
            assert server.fast_path.served == before + 1
        assert http.get(stream, params={"offset": "-1"}).content == b"xx"

        def scope(index: int) -> Scope:
            path = f"/v1/stream/many-{index}"
            return {"path": path, "raw_path": path.encode(), "root_path": ""}

        assert [app.stream_target(scope(index)) for index in range(3000)] == [
            f"v1/stream/many-{index}" for index in range(3000)
        ]
        assert len(app._stream_names) <= 1024  # type: ignore[attr-defined]  # (the bound)
