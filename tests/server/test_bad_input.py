"""Bad input gets the right 4xx status and a JSON error body, and leaves stored data alone.

Every case seeds a stream with known data (PUT + two POSTs), snapshots HEAD and a full GET,
sends one bad request, then checks the status, the error body and that the snapshot is
byte-identical afterwards. Bad PUTs to a new name must not create the stream.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
from servers import ServerProcess, session

JSON = "application/json"
TEXT = "text/plain"
LIMIT = 1024
SEED = {JSON: [b'{"n":1}', b'[{"n":2},{"n":3}]'], TEXT: [b"hello ", b"world"]}
SEEDED = {
    JSON: ("0000000000000003_0000000000000000", b'[{"n":1},{"n":2},{"n":3}]'),
    TEXT: ("0000000000000002_0000000000000000", b"hello world"),
}
GOOD = b'{"n":9}'
BIG = b"x" * (LIMIT * 2)


@dataclass(frozen=True)
class Case:
    id: str
    method: str
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    query: str = ""
    chunked: bool = False
    stream_type: str = JSON
    new_name: bool = False  # a PUT to a fresh name, which must not exist afterwards


def post(
    status: int,
    body: bytes = GOOD,
    *,
    id: str,
    headers: dict[str, str] | None = None,
    stream_type: str = JSON,
    chunked: bool = False,
) -> Case:
    headers = {"Content-Type": JSON} if headers is None else headers
    return Case(id, "POST", status, headers, body, chunked=chunked, stream_type=stream_type)


def get(id: str, query: str) -> Case:
    return Case(id, "GET", 400, query=query)


def put_new(id: str, status: int, headers: dict[str, str], body: bytes | None = None, chunked: bool = False) -> Case:
    return Case(id, "PUT", status, {"Content-Type": JSON, **headers}, body, chunked=chunked, new_name=True)


def producer(**values: str) -> dict[str, str]:
    return {"Content-Type": JSON, **{f"Producer-{k.capitalize()}": v for k, v in values.items()}}


CASES = [
    # POST bodies and content types
    post(400, b'{"n":', id="post-invalid-json"),
    post(400, b"NaN", id="post-json-nan"),
    post(400, b"\xff\xfe", id="post-invalid-utf8"),
    post(400, b"[]", id="post-empty-json-array"),
    post(400, b"", id="post-empty-body"),
    post(400, b"", headers={"Content-Type": JSON, "Stream-Closed": "false"}, id="post-empty-body-closed-false"),
    post(400, b"", headers={"Content-Type": TEXT}, stream_type=TEXT, id="post-empty-body-text"),
    post(400, headers={}, id="post-missing-content-type"),
    post(400, headers={"Content-Type": "not a type"}, id="post-malformed-content-type"),
    post(409, b"plain words", headers={"Content-Type": TEXT}, id="post-content-type-mismatch"),
    post(409, headers={"Content-Type": JSON}, stream_type=TEXT, id="post-content-type-mismatch-text"),
    # producer headers
    post(400, headers=producer(id="p1"), id="producer-only-id"),
    post(400, headers=producer(id="p1", epoch="0"), id="producer-missing-seq"),
    post(400, headers=producer(epoch="0", seq="0"), id="producer-missing-id"),
    post(400, headers=producer(id="p1", epoch="abc", seq="0"), id="producer-epoch-abc"),
    post(400, headers=producer(id="p1", epoch="1.5", seq="0"), id="producer-epoch-float"),
    post(400, headers=producer(id="p1", epoch="-1", seq="0"), id="producer-epoch-negative"),
    post(400, headers=producer(id="p1", epoch="0", seq="x"), id="producer-seq-non-integer"),
    post(400, headers=producer(id="", epoch="0", seq="0"), id="producer-id-empty"),
    # oversized bodies
    post(413, BIG, id="post-too-large-content-length"),
    post(413, BIG, chunked=True, id="post-too-large-chunked"),
    post(413, BIG, headers={"Content-Type": TEXT}, stream_type=TEXT, chunked=True, id="post-too-large-chunked-text"),
    # GET offsets and live modes
    get("offset-abc", "offset=abc"),
    get("offset-short-number", "offset=123"),
    get("offset-wrong-width", "offset=1_2"),
    get("offset-bad-digit", "offset=0000000000000000_000000000000000x"),
    get("offset-empty", "offset="),
    get("offset-twice", "offset=-1&offset=-1"),
    get("offset-beyond-tail", "offset=0000000000000099_0000000000000000"),
    get("offset-inside-tail", "offset=0000000000000003_0000000000000001"),
    get("offset-past-its-message", "offset=0000000000000000_0000000000000007"),  # {"n":1} has 7 bytes
    Case(
        "offset-past-its-message-arrow",
        "GET",
        400,
        {"Accept": "application/vnd.apache.arrow.stream"},
        query="offset=0000000000000001_0000000000000009",
    ),
    get("long-poll-without-offset", "live=long-poll"),
    get("sse-without-offset", "live=sse"),
    get("unknown-live-mode", "offset=-1&live=websocket"),
    # PUT to a new name with bad headers or bodies: nothing gets created
    *[put_new(f"ttl-{ttl}", 400, {"Stream-TTL": ttl}) for ttl in ("+3600", "03600", "3.6e3", "3600.0", "-1", "abc")],
    put_new("ttl-and-expires-at", 400, {"Stream-TTL": "3600", "Stream-Expires-At": "2099-01-01T00:00:00Z"}),
    *[
        put_new(f"expires-at-{i}", 400, {"Stream-Expires-At": value})
        for i, value in enumerate(("tomorrow", "2099-01-01", "2099-01-01T00:00:00", "2099-13-01T00:00:00Z"))
    ],
    put_new("fork-offset-without-source", 400, {"Stream-Fork-Offset": "0000000000000000_0000000000000000"}),
    put_new("put-invalid-json", 400, {}, b'{"n":'),
    put_new("put-malformed-content-type", 400, {"Content-Type": "nope"}),
    put_new("put-too-large-content-length", 413, {}, BIG),
    put_new("put-too-large-chunked", 413, {}, BIG, chunked=True),
    # PUT to the existing stream: malformed headers, or a different configuration
    Case("put-existing-bad-ttl", "PUT", 400, {"Content-Type": JSON, "Stream-TTL": "03600"}),
    Case("put-existing-other-content-type", "PUT", 409, {"Content-Type": TEXT}),
    Case("put-existing-other-ttl", "PUT", 409, {"Content-Type": JSON, "Stream-TTL": "3600"}),
    Case("put-existing-closed-flag", "PUT", 409, {"Content-Type": JSON, "Stream-Closed": "true"}),
    Case("put-existing-other-expiry", "PUT", 409, {"Content-Type": JSON, "Stream-Expires-At": "2099-01-01T00:00:00Z"}),
]


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the whole module, with a small --max-body-bytes."""
    data_dir: Path = tmp_path_factory.mktemp("bad-input") / "data"
    proc = ServerProcess(data_dir, ("--max-body-bytes", str(LIMIT), "--long-poll-timeout-ms", "500")).start()
    yield proc
    proc.kill()


@pytest.fixture
def http() -> Iterator[requests.Session]:
    with session() as s:
        yield s


def seed(http: requests.Session, url: str, content_type: str) -> None:
    assert http.put(url, headers={"Content-Type": content_type}).status_code == 201
    for body in SEED[content_type]:
        assert http.post(url, data=body, headers={"Content-Type": content_type}).status_code == 204


def snapshot(http: requests.Session, url: str) -> tuple[object, ...]:
    head = http.head(url)
    assert head.status_code == 200
    full = http.get(url, params={"offset": "-1"})
    assert full.status_code == 200 and full.headers.get("Stream-Up-To-Date") == "true"
    keys = ("Stream-Next-Offset", "Content-Type", "ETag", "Stream-TTL", "Stream-Expires-At", "Stream-Closed")
    return tuple(head.headers.get(k) for k in keys), full.headers["Stream-Next-Offset"], full.content


def assert_json_error(response: requests.Response) -> dict[str, str]:
    media_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
    assert media_type == "application/json", (response.status_code, response.headers, response.content)
    payload = json.loads(response.content)
    assert isinstance(payload, dict) and set(payload) == {"error"}, payload
    error = payload["error"]
    assert isinstance(error, dict), payload
    for key in ("code", "message"):
        assert isinstance(error.get(key), str) and error[key].strip(), payload
    return error


def chunks(body: bytes, size: int = 256) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_request_is_rejected_and_changes_nothing(
    limited: ServerProcess, http: requests.Session, case: Case
) -> None:
    url = limited.stream_url(f"bad-{uuid.uuid4().hex}")
    seed(http, url, case.stream_type)
    before = snapshot(http, url)
    assert before[1:] == SEEDED[case.stream_type]

    target = limited.stream_url(f"new-{uuid.uuid4().hex}") if case.new_name else url
    if case.query:
        target += "?" + case.query
    data = chunks(case.body) if case.chunked and case.body is not None else case.body
    response = http.request(case.method, target, headers=case.headers, data=data, timeout=30)

    assert response.status_code == case.status, (response.status_code, response.content)
    assert_json_error(response)
    if case.chunked:
        assert "Content-Length" not in response.request.headers
        assert response.request.headers.get("Transfer-Encoding") == "chunked"
    assert snapshot(http, url) == before
    if case.new_name:
        assert http.head(target).status_code == 404
        missing = http.get(target)
        assert missing.status_code == 404
        assert_json_error(missing)


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE", "PUT-fork"])
def test_missing_stream_is_404_with_json_error(limited: ServerProcess, http: requests.Session, method: str) -> None:
    url = limited.stream_url(f"missing-{uuid.uuid4().hex}")
    if method == "PUT-fork":
        target = limited.stream_url(f"fork-{uuid.uuid4().hex}")
        response = http.put(target, headers={"Stream-Forked-From": url})
        assert http.head(target).status_code == 404
    else:
        response = http.request(method, url, data=GOOD, headers={"Content-Type": JSON})
    assert response.status_code == 404, (response.status_code, response.content)
    assert_json_error(response)
    assert http.head(url).status_code == 404


def test_body_limit_is_the_configured_one(limited: ServerProcess, http: requests.Session) -> None:
    """Exactly --max-body-bytes is accepted, one more byte is 413; the default server takes far more."""
    url = limited.stream_url(f"limit-{uuid.uuid4().hex}")
    seed(http, url, TEXT)
    before = snapshot(http, url)
    too_big = http.post(url, data=b"y" * (LIMIT + 1), headers={"Content-Type": TEXT})
    assert too_big.status_code == 413
    assert_json_error(too_big)
    assert snapshot(http, url) == before
    at_limit = http.post(url, data=chunks(b"z" * LIMIT), headers={"Content-Type": TEXT})
    assert at_limit.status_code == 204, at_limit.content
    assert http.get(url, params={"offset": "-1"}).content == b"hello world" + b"z" * LIMIT


def test_default_limit_accepts_what_the_small_limit_rejects(server: ServerProcess, http: requests.Session) -> None:
    url = server.stream_url("roomy")
    seed(http, url, TEXT)
    assert http.post(url, data=BIG, headers={"Content-Type": TEXT}).status_code == 204
    assert http.get(url, params={"offset": "-1"}).content == b"hello world" + BIG


def test_a_refusal_says_what_was_wrong_and_what_is_valid(limited: ServerProcess, http: requests.Session) -> None:
    """A re-create names the settings that differ (the stream's value and the one asked); a
    malformed offset names the offsets that are valid."""
    url = limited.stream_url(f"explain-{uuid.uuid4().hex}")
    assert http.put(url, headers={"Content-Type": JSON, "Stream-TTL": "3600"}).status_code == 201
    other = http.put(url, headers={"Content-Type": TEXT, "Stream-TTL": "3600"})
    assert other.status_code == 409
    message = other.json()["error"]["message"]
    assert "content type is 'application/json', the request asks 'text/plain'" in message, message
    assert "Stream-TTL" not in message, message  # (only what differs)
    bad = http.get(url, params={"offset": "12"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_OFFSET"
    assert "-1 (the start), now (the tail)" in bad.json()["error"]["message"], bad.text
