"""Read plans, the framing probe and planned files, through a scripted transport: the exact
requests sent (headers, parameters, no credentials on file URLs) and how answers are typed."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from fake_transport import FakeClock, FakeTransport, Reply, reset

from pyspark_durable_streams.client import (
    Backoff,
    Client,
    ConnectError,
    Forbidden,
    Gone,
    NotFound,
    PlannedFile,
    PlannedRowGroup,
    PlanSegment,
    PlansUnavailable,
    ProducerRequest,
    ReadPlan,
    ResponseError,
)
from pyspark_durable_streams.client.read_plans import READ_PLAN

BASE = "http://127.0.0.1:9"
URL = f"{BASE}/v1/stream/orders"
PRESIGNED = "https://bucket.s3.example/table/part-1.parquet?X-Amz-Signature=abc"
ROW_GROUP = {"index": 0, "first_seq": 0, "last_seq": 3, "rows": 4, "exact": True}
PLAN: dict[str, Any] = {
    "stream": "orders",
    "incarnation": "7-1",
    "content_type": "application/json",
    "start": f"{0:016d}_{0:016d}",
    "end": f"{9:016d}_{0:016d}",
    "delta_end": f"{4:016d}_{0:016d}",
    "table_version": 12,
    "expires_at_ms": 1_700_000_000_000,
    "segments": [
        {
            "stream_uid": 7,
            "first_seq": 0,
            "end_seq": 4,
            "files": [
                {
                    "path": "part-0.parquet",
                    "size": 100,
                    "url": "/v1/files/part-0.parquet?expires=1&signature=s",
                    "local_path": "/data/table/part-0.parquet",
                    "row_groups": [ROW_GROUP],
                },
                {"path": "part-1.parquet", "size": 50, "url": PRESIGNED, "row_groups": []},
            ],
        }
    ],
}


def plan_reply(body: dict[str, Any] = PLAN) -> Reply:
    return Reply(200, {"Content-Type": READ_PLAN}, json.dumps(body).encode())


def test_a_read_plan_is_asked_for_and_typed() -> None:
    transport = FakeTransport.script(plan_reply())
    with Client(BASE, token="secret", transport=transport) as client:
        plan = client.stream(URL).read_plan(PLAN["start"], end=PLAN["end"])
    (request,) = transport.requests
    assert (request.method, request.url) == ("GET", URL)
    assert request.params == {"offset": PLAN["start"], "end": PLAN["end"]}
    assert request.headers["Accept"] == READ_PLAN and request.headers["Authorization"] == "Bearer secret"
    signed = PlannedFile(
        f"{BASE}/v1/files/part-0.parquet?expires=1&signature=s",
        100,
        (PlannedRowGroup(0, 0, 3, 4, True),),
        "part-0.parquet",
        "/data/table/part-0.parquet",
    )
    presigned = PlannedFile(PRESIGNED, 50, (), "part-1.parquet", None)
    assert plan == ReadPlan(
        "orders",
        "7-1",
        "application/json",
        PLAN["start"],
        PLAN["end"],
        PLAN["delta_end"],
        12,
        1_700_000_000_000,
        (PlanSegment(7, 0, 4, (signed, presigned)),),
    )


def test_without_end_the_plan_runs_to_the_tail() -> None:
    transport = FakeTransport.script(plan_reply())
    with Client(BASE, transport=transport) as client:
        client.stream(URL).read_plan()
    assert transport.requests[0].params == {"offset": "-1"}


@pytest.mark.parametrize(
    "reply",
    [
        Reply(501, {"Content-Type": "application/json"}, b'{"error": {"code": "READ_PLANS_UNAVAILABLE"}}'),
        Reply(406, {}, b"not acceptable"),
        Reply(200, {"Content-Type": "application/json"}, b"[1,2,3]"),  # a server that ignores the Accept
    ],
)
def test_a_server_without_plans_says_so(reply: Reply) -> None:
    with Client(BASE, transport=FakeTransport.script(reply)) as client, pytest.raises(PlansUnavailable, match=URL):
        client.stream(URL).read_plan("-1")


def test_gone_is_not_plans_unavailable() -> None:
    reply = Reply(410, {"Content-Type": "application/json"}, b'{"error": {"code": "GONE", "message": "retention"}}')
    with Client(BASE, transport=FakeTransport.script(reply)) as client, pytest.raises(Gone, match="retention"):
        client.stream(URL).read_plan("-1")


@pytest.mark.parametrize(
    "broken",
    [
        {k: v for k, v in PLAN.items() if k != "delta_end"},
        {**PLAN, "table_version": "twelve"},
        {**PLAN, "segments": [{**PLAN["segments"][0], "files": [{"url": "x", "size": 1, "path": "p"}]}]},
        {
            **PLAN,
            "segments": [
                {
                    **PLAN["segments"][0],
                    "files": [{**PLAN["segments"][0]["files"][0], "row_groups": [{**ROW_GROUP, "exact": "yes"}]}],
                }
            ],
        },
    ],
)
def test_a_malformed_plan_is_a_response_error(broken: dict[str, Any]) -> None:
    transport = FakeTransport.script(plan_reply(broken))
    with Client(BASE, transport=transport) as client, pytest.raises(ResponseError, match="malformed read plan"):
        client.stream(URL).read_plan("-1")


@pytest.mark.parametrize(
    ("reply", "framing"),
    [
        (Reply(200, {"Content-Type": "application/vnd.apache.arrow.stream"}, b"\xff"), "arrow"),
        (Reply(200, {"Content-Type": 'multipart/mixed; boundary="b1"'}, b"--b1--\r\n"), "multipart"),
        (Reply(200, {"Content-Type": "application/json"}, b"[]"), "plain"),
        (Reply(204, {"Stream-Next-Offset": "5"}), "plain"),
    ],
)
def test_the_framing_probe_reads_once_at_the_offset(reply: Reply, framing: str) -> None:
    transport = FakeTransport.script(reply)
    with Client(BASE, token="secret", transport=transport) as client:
        assert client.stream(URL).read_framing("0005") == framing
    (request,) = transport.requests
    assert request.params == {"offset": "0005"} and request.stream
    assert request.headers["Accept"] == "application/vnd.apache.arrow.stream, multipart/mixed;q=0.5"
    assert request.headers["Authorization"] == "Bearer secret"


FILE = bytes(range(200))


def ranged(request: Any) -> Reply:
    first, last = (int(part) for part in request.headers["Range"].removeprefix("bytes=").split("-"))
    return Reply(206, {"Content-Range": f"bytes {first}-{last}/{len(FILE)}"}, FILE[first : last + 1])


def test_a_planned_file_is_read_with_ranges_and_without_credentials() -> None:
    transport = FakeTransport(ranged)
    headers = {"X-Tenant": "t1"}
    with Client(BASE, token="secret", headers=headers, transport=transport) as client:
        file = client.open_file(PRESIGNED, len(FILE))
        assert file.read(10) == FILE[:10]
        file.seek(-5, 2)
        assert file.read() == FILE[-5:]
        assert file.read() == b""
        buffer = bytearray(4)
        file.seek(100)
        assert file.readinto(buffer) == 4 and bytes(buffer) == FILE[100:104]
    assert [request.headers["Range"] for request in transport.requests] == [
        "bytes=0-9",
        "bytes=195-199",
        "bytes=100-103",
    ]
    assert all(dict(request.headers) == {"Range": request.headers["Range"]} for request in transport.requests)
    assert not any(request.credentials for request in transport.requests)


def test_a_server_that_ignores_range_still_gives_the_slice() -> None:
    transport = FakeTransport(lambda request: Reply(200, {}, FILE))
    with Client(BASE, transport=transport) as client:
        file = client.open_file(PRESIGNED, len(FILE))
        file.seek(20)
        assert file.read(3) == FILE[20:23] and file.tell() == 23


@pytest.mark.parametrize(
    ("outcome", "error"),
    [
        (Reply(404, {"Content-Type": "application/json"}, b'{"error": {"code": "FILE_NOT_FOUND"}}'), NotFound),
        (Reply(403, {}, b"expired"), Forbidden),
        (reset(), ConnectError),
    ],
)
def test_a_planned_file_that_is_gone_raises_the_clients_errors(outcome: Any, error: type[Exception]) -> None:
    with Client(BASE, transport=FakeTransport.script(outcome)) as client, pytest.raises(error):
        client.open_file(PRESIGNED, 10).read(4)


def test_deliver_sends_the_callers_triple_and_reports_duplicates() -> None:
    clock = FakeClock()
    transport = FakeTransport.script(Reply(503, {"Retry-After": "2"}), Reply(204, {"Stream-Next-Offset": "9"}))
    backoff = Backoff(initial_s=0.1, deadline_s=30, clock=clock.clock, sleep=clock.sleep)
    request = ProducerRequest(URL, "text/plain", "p1", 3, 5, b"body")
    with Client(BASE, token="secret", transport=transport) as client:
        result = client.deliver(request, backoff=backoff)
    assert result.duplicate and result.next_offset == "9"
    assert clock.sleeps == [2.0]
    first, second = transport.requests
    assert first == second
    assert {key: first.headers[key] for key in ("Producer-Id", "Producer-Epoch", "Producer-Seq")} == {
        "Producer-Id": "p1",
        "Producer-Epoch": "3",
        "Producer-Seq": "5",
    }
    assert first.headers["Authorization"] == "Bearer secret" and first.content == b"body"


# -- the default transport, over real HTTP on loopback ------------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        self.seen.append(dict(self.headers))
        self.send_response(206)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[dict[str, str]]]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    _Recorder.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.seen
    finally:
        server.shutdown()
        server.server_close()


def test_no_credential_of_any_kind_reaches_a_planned_file(
    recorder: tuple[str, list[dict[str, str]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client's token, the session's own Authorization header and auth, and ~/.netrc all
    apply to the server's requests; none to a planned file's URL."""
    url, seen = recorder
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login netrc-user password netrc-password\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    for session_headers, auth in (({"Authorization": "Basic c2Vzc2lvbg=="}, None), ({}, ("user", "pw")), ({}, None)):
        with requests.Session() as session:
            session.headers.update(session_headers)
            session.trust_env = True
            with Client(url, token="secret", session=session, auth=auth) as client:
                assert client.open_file(f"{url}/part-0.parquet?signature=s", 2).read() == b"ok"
                client.transport.request("GET", f"{url}/v1/stream/x", ok=(206,))
    files, server = seen[0::2], seen[1::2]
    assert len(files) == 3 and all("Authorization" not in headers for headers in files)
    assert all(headers.get("Authorization") for headers in server)  # each kind does reach the server
