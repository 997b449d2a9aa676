"""Buckets (extensions spec section 1): identifiers, create/get/delete, the stream listing,
and every base-protocol operation on the bucketed surface ``/{bucket_id}/{stream_id}``.

Choices where the spec is ambiguous are in PROTOCOL-NOTES.md ("Extensions"): ``after``
is exclusive and ``next_cursor`` is the last id returned; ``v1`` is not a bucket id.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
from multipart_parsing import raw_request
from servers import ServerProcess, once_a_long_poll_waits, session

TEXT = {"Content-Type": "text/plain"}
LONG_POLL_TIMEOUT_MS = 1500
LISTING_FIELDS = {"bucket_id", "prefix", "stream_count", "streams", "next_cursor", "has_more"}
ENTRY_FIELDS = {"stream_id", "status", "content_type", "tail_offset", "created_at_ms", "last_write_at_ms"}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module; every test works in buckets of its own."""
    data_dir = tmp_path_factory.mktemp("buckets") / "data"
    server = ServerProcess(data_dir, ("--long-poll-timeout-ms", str(LONG_POLL_TIMEOUT_MS))).start()
    yield server
    server.kill()


def new_bucket(http: requests.Session, server: ServerProcess) -> str:
    bucket_id = f"bk-{uuid.uuid4().hex[:12]}"
    response = http.put(f"{server.url}/{bucket_id}")
    assert response.status_code == 201, response.text
    return bucket_id


def listing(http: requests.Session, server: ServerProcess, bucket_id: str, **params: str) -> dict[str, object]:
    response = http.get(f"{server.url}/{bucket_id}/streams", params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert isinstance(body, dict)
    return body


def listed_ids(body: dict[str, object]) -> list[str]:
    streams = body["streams"]
    assert isinstance(streams, list)
    return [entry["stream_id"] for entry in streams]


def sse_events(response: requests.Response) -> Iterator[tuple[str, str]]:
    """``(event, data)`` pairs of a ``text/event-stream`` body (data lines joined by LF)."""
    event = "message"
    data: list[str] = []
    for raw in response.iter_lines(decode_unicode=False):
        line = raw.decode("utf-8")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[len("event:") :].strip()
        elif line.startswith("data:"):
            value = line[len("data:") :]
            data.append(value[1:] if value.startswith(" ") else value)


def sse_until_up_to_date(http: requests.Session, url: str, offset: str) -> tuple[str, dict[str, object]]:
    """The concatenated data of an SSE read up to its first up-to-date control event."""
    with http.get(url, params={"offset": offset, "live": "sse"}, stream=True, timeout=10) as response:
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"].startswith("text/event-stream")
        text = ""
        for event, data in sse_events(response):
            if event == "data":
                text += data
            elif event == "control":
                control = json.loads(data)
                if control.get("upToDate") or control.get("streamClosed"):
                    return text, control
    raise AssertionError("the event stream ended before it was up to date")


# -- identifiers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "bucket_id",
    [
        "abc",  # too short
        "a" * 65,  # too long
        "ABCD",  # uppercase
        "abcD",
        "v1",  # the base surface's first segment is not a bucket id (2 characters)
        "ab.cd",
        "abc.",
        "ab%20cd",  # a space
        "ab~cd",
        "ab+cd",
        "%C3%A9tat",  # non-ASCII
    ],
)
def test_invalid_bucket_ids_are_rejected_with_400(
    shared: ServerProcess, http: requests.Session, bucket_id: str
) -> None:
    url = f"{shared.url}/{bucket_id}"
    assert http.put(url).status_code == 400
    assert http.get(url).status_code == 400
    assert http.delete(url).status_code == 400
    assert http.get(f"{url}/streams").status_code == 400


@pytest.mark.parametrize("bucket_id", ["abcd", "a" * 64, "0000", "a_b-", "----", "____", "x-y_z-0123456789"])
def test_valid_bucket_ids_at_the_edges_of_the_pattern(
    shared: ServerProcess, http: requests.Session, bucket_id: str
) -> None:
    created = http.put(f"{shared.url}/{bucket_id}")
    assert created.status_code == 201, created.text
    assert http.get(f"{shared.url}/{bucket_id}").json()["bucket_id"] == bucket_id
    assert http.delete(f"{shared.url}/{bucket_id}").status_code == 204


def test_create_bucket_then_conflict(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = f"new-{uuid.uuid4().hex[:8]}"
    assert http.get(f"{shared.url}/{bucket_id}").status_code == 404
    created = http.put(f"{shared.url}/{bucket_id}")
    assert created.status_code == 201
    assert created.json()["bucket_id"] == bucket_id
    again = http.put(f"{shared.url}/{bucket_id}")
    assert again.status_code == 409
    assert http.get(f"{shared.url}/{bucket_id}").json()["streams"] == 0  # the conflict changed nothing


def test_bucket_metadata_counts_streams(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    url = f"{shared.url}/{bucket_id}"
    metadata = http.get(url)
    assert metadata.status_code == 200
    assert metadata.headers["Content-Type"].startswith("application/json")
    body = metadata.json()
    assert body["bucket_id"] == bucket_id
    assert body["streams"] == 0 and isinstance(body["streams"], int) and not isinstance(body["streams"], bool)
    for name in ("one", "two", "three"):
        assert http.put(f"{url}/{name}", headers=TEXT).status_code == 201
    assert http.get(url).json()["streams"] == 3
    assert http.delete(f"{url}/two").status_code == 204
    assert http.get(url).json() == {**body, "streams": 2}


def test_unknown_bucket_is_404(shared: ServerProcess, http: requests.Session) -> None:
    missing = f"{shared.url}/nobucket-{uuid.uuid4().hex[:8]}"
    assert http.get(missing).status_code == 404
    assert http.delete(missing).status_code == 404
    assert http.get(f"{missing}/streams").status_code == 404


def test_delete_bucket(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    url = f"{shared.url}/{bucket_id}"
    assert http.put(f"{url}/s", headers=TEXT, data="x").status_code == 201
    refused = http.delete(url)
    assert refused.status_code == 409  # not empty
    assert http.get(url).json()["streams"] == 1
    assert http.get(f"{url}/s").text == "x"
    assert http.delete(f"{url}/s").status_code == 204
    assert http.delete(url).status_code == 204
    assert http.get(url).status_code == 404
    assert http.delete(url).status_code == 404
    assert http.get(f"{url}/streams").status_code == 404
    assert http.put(f"{url}/s", headers=TEXT).status_code == 404
    # The id can be used again, and the new bucket starts empty.
    assert http.put(url).status_code == 201
    assert http.get(url).json()["streams"] == 0
    assert listed_ids(listing(http, shared, bucket_id)) == []
    assert http.get(f"{url}/s").status_code == 404


def test_delete_bucket_refused_while_a_closed_stream_remains(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    url = f"{shared.url}/{bucket_id}"
    assert http.put(f"{url}/closed", headers={**TEXT, "Stream-Closed": "true"}).status_code == 201
    assert http.delete(url).status_code == 409


def test_no_implicit_bucket_creation(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = f"implicit-{uuid.uuid4().hex[:8]}"
    stream = f"{shared.url}/{bucket_id}/s"
    assert http.put(stream, headers=TEXT, data="x").status_code == 404
    assert http.get(f"{shared.url}/{bucket_id}").status_code == 404
    # Every stream operation under a missing bucket answers 404 (section 1.6).
    assert http.post(stream, headers=TEXT, data="x").status_code == 404
    assert http.get(stream).status_code == 404
    assert http.get(stream, params={"offset": "-1", "live": "long-poll"}).status_code == 404
    assert http.get(stream, params={"offset": "-1", "live": "sse"}).status_code == 404
    assert http.head(stream).status_code == 404
    assert http.delete(stream).status_code == 404
    assert http.get(f"{stream}/bootstrap").status_code == 404
    assert http.get(f"{stream}/snapshot", allow_redirects=False).status_code == 404
    assert http.put(f"{stream}/snapshot/0000000000000000_0000000000000000", data="s").status_code == 404
    assert http.get(f"{shared.url}/{bucket_id}").status_code == 404


# -- stream ids --------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["PUT", "POST", "DELETE"])
def test_streams_is_reserved_for_the_listing(shared: ServerProcess, http: requests.Session, method: str) -> None:
    bucket_id = new_bucket(http, shared)
    url = f"{shared.url}/{bucket_id}/streams"
    response = http.request(method, url, headers=TEXT, data="x")
    # The listing resource exists and is read-only: 405, not a stream-id error.
    assert (response.status_code, response.json()["error"]["code"]) == (405, "METHOD_NOT_ALLOWED"), response.text
    # GET is still the listing, and no stream called "streams" came into being.
    body = listing(http, shared, bucket_id)
    assert body["bucket_id"] == bucket_id
    assert listed_ids(body) == []
    assert http.get(f"{shared.url}/{bucket_id}").json()["streams"] == 0


def test_a_slash_cannot_be_part_of_a_stream_id(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    base = f"{shared.url}/{bucket_id}"
    # An encoded slash is inside one path segment: an invalid stream id (400). A raw slash makes
    # a deeper path that names no resource of the bucketed surface (404).
    for path, status in (("a%2Fb", 400), ("a/b", 404), ("a%2fb%2fc", 400)):
        response = raw_request(shared.port, "PUT", f"/{bucket_id}/{path}", b"x", TEXT)
        assert response.status == status, (path, response.status)
    assert listed_ids(listing(http, shared, bucket_id)) == []
    assert http.get(f"{base}/a").status_code == 404  # no stream "a" was created either


@pytest.mark.parametrize("stream_id", ["a%00b", "%00", "..", "%2E%2E", ".", "%2e"])
def test_nul_and_dot_segment_stream_ids_are_400(shared: ServerProcess, http: requests.Session, stream_id: str) -> None:
    bucket_id = new_bucket(http, shared)
    assert raw_request(shared.port, "PUT", f"/{bucket_id}/{stream_id}", headers=TEXT).status == 400
    assert listed_ids(listing(http, shared, bucket_id)) == []


@pytest.mark.parametrize("stream_id", ["a..b", "..a", "a.."])
def test_stream_ids_containing_dot_dot_are_400(shared: ServerProcess, http: requests.Session, stream_id: str) -> None:
    bucket_id = new_bucket(http, shared)
    assert raw_request(shared.port, "PUT", f"/{bucket_id}/{stream_id}", headers=TEXT).status == 400


def test_single_dots_inside_stream_ids_are_fine(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    assert http.put(f"{shared.url}/{bucket_id}/a.b.c", headers=TEXT, data="x").status_code == 201
    assert listed_ids(listing(http, shared, bucket_id)) == ["a.b.c"]


def test_bucket_plus_stream_key_is_at_most_122_bytes(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)  # "bk-" + 12 hex = 15 characters
    room = 122 - len(bucket_id) - 1
    url = f"{shared.url}/{bucket_id}"
    assert http.put(f"{url}/{'s' * room}", headers=TEXT).status_code == 201
    assert http.put(f"{url}/{'t' * (room + 1)}", headers=TEXT).status_code == 400
    assert listed_ids(listing(http, shared, bucket_id)) == ["s" * room]

    longest = ("z" * 64 + bucket_id)[-64:]  # a fresh bucket id of the maximum length
    assert http.put(f"{shared.url}/{longest}").status_code == 201
    assert http.put(f"{shared.url}/{longest}/{'a' * 57}", headers=TEXT).status_code == 201
    assert http.put(f"{shared.url}/{longest}/{'b' * 58}", headers=TEXT).status_code == 400


def test_multi_byte_stream_ids_are_counted_in_bytes(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    room = 122 - len(bucket_id) - 1  # 106 bytes
    url = f"{shared.url}/{bucket_id}"
    two_byte_fits = "é" * (room // 2)  # 53 characters, 106 bytes
    two_byte_over = "é" * (room // 2 + 1)  # 54 characters, 108 bytes: too many bytes, few characters
    three_byte_over = "日" * (room // 3 + 1)  # 36 characters, 108 bytes
    four_byte_over = "😀" * (room // 4 + 1)  # 27 characters, 108 bytes
    assert max(len(two_byte_over), len(three_byte_over), len(four_byte_over)) < room
    assert http.put(f"{url}/{two_byte_fits}", headers=TEXT, data="é").status_code == 201
    assert http.put(f"{url}/{two_byte_over}", headers=TEXT).status_code == 400
    assert http.put(f"{url}/{three_byte_over}", headers=TEXT).status_code == 400
    assert http.put(f"{url}/{four_byte_over}", headers=TEXT).status_code == 400
    assert listed_ids(listing(http, shared, bucket_id)) == [two_byte_fits]
    assert http.get(f"{url}/{two_byte_fits}").content == "é".encode()


@pytest.mark.parametrize("stream_id", ["日本", "😀" * 26, "é"])
def test_non_ascii_stream_ids_are_created_with_a_percent_encoded_location(
    shared: ServerProcess, http: requests.Session, stream_id: str
) -> None:
    bucket_id = new_bucket(http, shared)
    encoded = quote(stream_id, safe="")
    created = raw_request(shared.port, "PUT", f"/{bucket_id}/{encoded}", b"x", TEXT)
    assert created.status == 201, created.body
    assert created.headers["location"] == f"{shared.url}/{bucket_id}/{encoded}"
    assert listed_ids(listing(http, shared, bucket_id)) == [stream_id]
    assert http.get(f"{shared.url}/{bucket_id}/{stream_id}").text == "x"


# -- the base protocol on the bucketed surface -------------------------------------------


def test_create_append_read_head_on_the_bucketed_surface(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    url = f"{shared.url}/{bucket_id}/events"
    created = http.put(url, headers=TEXT, data="hello")
    assert created.status_code == 201
    assert created.headers["Location"] == url
    assert created.headers["Content-Type"] == "text/plain"
    first_tail = created.headers["Stream-Next-Offset"]
    assert http.put(url, headers=TEXT).status_code == 200  # idempotent create
    assert http.put(url, headers={"Content-Type": "application/json"}).status_code == 409

    appended = http.post(url, headers=TEXT, data=" world")
    assert appended.status_code == 204
    tail = appended.headers["Stream-Next-Offset"]
    assert tail > first_tail
    assert http.post(url, headers={"Content-Type": "application/json"}, data="[1]").status_code == 409

    read = http.get(url, params={"offset": "-1"})
    assert read.status_code == 200
    assert read.text == "hello world"
    assert read.headers["Stream-Next-Offset"] == tail
    assert read.headers["Stream-Up-To-Date"] == "true"
    assert http.get(url, params={"offset": first_tail}).text == " world"
    assert http.get(url, params={"offset": "now"}).headers["Stream-Next-Offset"] == tail

    head = http.head(url)
    assert head.status_code == 200
    assert head.headers["Stream-Next-Offset"] == tail
    assert head.headers["Content-Type"] == "text/plain"
    assert "Stream-Snapshot-Offset" not in head.headers


def test_long_poll_on_the_bucketed_surface(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    url = f"{shared.url}/{bucket_id}/lp"
    tail = http.put(url, headers=TEXT, data="a").headers["Stream-Next-Offset"]

    immediate = http.get(url, params={"offset": "-1", "live": "long-poll"})
    assert immediate.status_code == 200 and immediate.text == "a"

    def append() -> None:
        assert session().post(url, headers=TEXT, data="b").status_code == 204

    writer = once_a_long_poll_waits(url, append)
    waited = http.get(url, params={"offset": tail, "live": "long-poll"}, timeout=10)
    writer.join()
    assert waited.status_code == 200
    assert waited.text == "b"
    assert "Stream-Cursor" in waited.headers

    new_tail = waited.headers["Stream-Next-Offset"]
    timed_out = http.get(url, params={"offset": new_tail, "live": "long-poll"}, timeout=10)
    assert timed_out.status_code == 204
    assert timed_out.headers["Stream-Up-To-Date"] == "true"
    assert timed_out.headers["Stream-Next-Offset"] == new_tail


def test_sse_on_the_bucketed_surface(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    url = f"{shared.url}/{bucket_id}/sse"
    assert http.put(url, headers=TEXT, data="line one").status_code == 201
    tail = http.post(url, headers=TEXT, data=" and two").headers["Stream-Next-Offset"]
    text, control = sse_until_up_to_date(http, url, "-1")
    assert text == "line one and two"
    assert control["streamNextOffset"] == tail

    binary = f"{shared.url}/{bucket_id}/sse-bin"
    assert http.put(binary, headers={"Content-Type": "application/octet-stream"}, data=b"\x00\xff").status_code == 201
    with http.get(binary, params={"offset": "-1", "live": "sse"}, stream=True, timeout=10) as response:
        assert response.headers["Stream-SSE-Data-Encoding"] == "base64"
        first_data = next(data for event, data in sse_events(response) if event == "data")
    assert first_data == "AP8="


def test_close_and_delete_on_the_bucketed_surface(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    url = f"{shared.url}/{bucket_id}/closing"
    assert http.put(url, headers=TEXT, data="last words").status_code == 201
    closed = http.post(url, headers={"Stream-Closed": "true"})
    assert closed.status_code == 204
    assert closed.headers["Stream-Closed"] == "true"
    assert http.post(url, headers=TEXT, data="more").status_code == 409
    read = http.get(url, params={"offset": "-1"})
    assert read.text == "last words"
    assert read.headers["Stream-Closed"] == "true"
    assert http.head(url).headers["Stream-Closed"] == "true"
    entry = listing(http, shared, bucket_id)["streams"]
    assert isinstance(entry, list) and entry[0]["status"] == "Closed"

    assert http.delete(url).status_code == 204
    assert http.get(url).status_code == 404
    assert http.head(url).status_code == 404
    assert http.delete(url).status_code == 404
    assert http.put(url, headers=TEXT).status_code == 201  # the id is free again
    assert http.get(url).text == ""


def test_idempotent_producer_on_the_bucketed_surface(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    url = f"{shared.url}/{bucket_id}/produced"
    assert http.put(url, headers=TEXT).status_code == 201

    def produce(epoch: int, seq: int, data: str) -> requests.Response:
        headers = {**TEXT, "Producer-Id": "p1", "Producer-Epoch": str(epoch), "Producer-Seq": str(seq)}
        return http.post(url, headers=headers, data=data)

    first = produce(0, 0, "a")
    assert first.status_code == 200
    assert first.headers["Producer-Epoch"] == "0" and first.headers["Producer-Seq"] == "0"
    assert produce(0, 1, "b").status_code == 200
    assert produce(0, 1, "b").status_code == 204  # duplicate: acknowledged, not appended
    gap = produce(0, 5, "x")
    assert gap.status_code == 409
    assert gap.headers["Producer-Expected-Seq"] == "2" and gap.headers["Producer-Received-Seq"] == "5"
    assert produce(1, 0, "c").status_code == 200  # new epoch
    stale = produce(0, 2, "z")
    assert stale.status_code == 403
    assert stale.headers["Producer-Epoch"] == "1"
    assert http.get(url, params={"offset": "-1"}).text == "abc"


def test_fork_within_a_bucket(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    base = f"{shared.url}/{bucket_id}"
    assert http.put(f"{base}/src", headers=TEXT, data="one").status_code == 201
    middle = http.post(f"{base}/src", headers=TEXT, data="two").headers["Stream-Next-Offset"]
    assert http.post(f"{base}/src", headers=TEXT, data="three").status_code == 204

    forked = http.put(f"{base}/fork", headers={**TEXT, "Stream-Forked-From": f"/{bucket_id}/src"})
    assert forked.status_code == 201
    assert http.post(f"{base}/fork", headers=TEXT, data="+fork").status_code == 204
    assert http.get(f"{base}/fork", params={"offset": "-1"}).text == "onetwothree+fork"

    at_offset = {**TEXT, "Stream-Forked-From": f"/{bucket_id}/src", "Stream-Fork-Offset": middle}
    assert http.put(f"{base}/early", headers=at_offset).status_code == 201
    assert http.get(f"{base}/early", params={"offset": "-1"}).text == "onetwo"
    assert http.get(f"{base}/src", params={"offset": "-1"}).text == "onetwothree"  # the source is untouched
    assert listed_ids(listing(http, shared, bucket_id)) == ["early", "fork", "src"]

    missing_source = http.put(f"{base}/orphan", headers={**TEXT, "Stream-Forked-From": f"/{bucket_id}/nothing"})
    assert missing_source.status_code == 404


def test_base_surface_and_bucket_paths_never_collide(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    bucketed = f"{shared.url}/{bucket_id}/s"
    base_nested = f"{shared.url}/v1/stream/{bucket_id}/s"
    base_flat = f"{shared.url}/v1/stream/s-{bucket_id}"
    assert http.put(bucketed, headers=TEXT, data="bucketed").status_code == 201
    assert http.put(base_nested, headers=TEXT, data="base nested").status_code == 201
    assert http.put(base_flat, headers=TEXT, data="base flat").status_code == 201
    assert http.get(bucketed).text == "bucketed"
    assert http.get(base_nested).text == "base nested"
    assert http.get(base_flat).text == "base flat"
    assert listed_ids(listing(http, shared, bucket_id)) == ["s"]
    assert http.get(f"{shared.url}/{bucket_id}").json()["streams"] == 1

    # "stream" is a valid bucket id; its streams are not the base surface's.
    stream_bucket = http.put(f"{shared.url}/stream")  # only this test creates it on the module's server
    assert stream_bucket.status_code == 201, stream_bucket.text
    assert http.put(f"{shared.url}/stream/s-{bucket_id}", headers=TEXT, data="in bucket 'stream'").status_code == 201
    assert http.get(base_flat).text == "base flat"
    assert http.get(f"{shared.url}/stream/s-{bucket_id}").text == "in bucket 'stream'"

    # "v1" is not a bucket, so nothing on the bucketed surface can shadow /v1/stream/...
    assert http.put(f"{shared.url}/v1").status_code == 400
    assert http.get(f"{shared.url}/v1/streams").status_code == 400

    assert http.delete(bucketed).status_code == 204
    assert http.get(base_nested).text == "base nested"
    assert http.delete(base_nested).status_code == 204
    assert http.delete(f"{shared.url}/stream/s-{bucket_id}").status_code == 204
    assert http.delete(f"{shared.url}/{bucket_id}").status_code == 204  # base streams never counted
    assert http.get(base_flat).text == "base flat"


# -- listing -----------------------------------------------------------------------------


def test_listing_fields_and_values(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    base = f"{shared.url}/{bucket_id}"
    before_ms = int(time.time() * 1000)
    assert http.put(f"{base}/text", headers=TEXT, data="a").status_code == 201
    assert http.put(f"{base}/json", headers={"Content-Type": "application/json"}, data="[1, 2, 3]").status_code == 201
    assert http.put(f"{base}/empty").status_code == 201
    assert http.put(f"{base}/closed", headers={**TEXT, "Stream-Closed": "true"}).status_code == 201
    created_ms = int(time.time() * 1000)
    time.sleep(0.02)  # (the append's time must differ from the creations': time itself is the condition)
    assert http.post(f"{base}/text", headers=TEXT, data="b").status_code == 204
    after_ms = int(time.time() * 1000)

    response = http.get(f"{base}/streams")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    body = response.json()
    assert body.keys() >= LISTING_FIELDS, body.keys()
    assert body["bucket_id"] == bucket_id
    assert body["prefix"] == ""  # omitted = the empty prefix: every stream id is eligible
    assert body["has_more"] is False
    assert body["next_cursor"] is None
    assert body["stream_count"] == 4
    entries = {entry["stream_id"]: entry for entry in body["streams"]}
    assert list(entries) == ["closed", "empty", "json", "text"]
    for entry in entries.values():
        assert entry.keys() >= ENTRY_FIELDS, entry.keys()
        assert isinstance(entry["tail_offset"], int) and not isinstance(entry["tail_offset"], bool)
        assert before_ms <= entry["created_at_ms"] <= created_ms
        assert entry["created_at_ms"] <= entry["last_write_at_ms"] <= after_ms
    assert entries["text"]["status"] == "Open"
    assert entries["closed"]["status"] == "Closed"
    assert entries["text"]["content_type"] == "text/plain"
    assert entries["json"]["content_type"] == "application/json"
    assert entries["empty"]["content_type"] == "application/octet-stream"
    # tail_offset is an integer position: our model counts messages (a JSON array is 3 of them).
    assert [entries[name]["tail_offset"] for name in ("text", "json", "empty", "closed")] == [2, 3, 0, 0]
    assert entries["text"]["last_write_at_ms"] > entries["text"]["created_at_ms"]
    assert entries["json"]["last_write_at_ms"] == entries["json"]["created_at_ms"]


def test_listing_is_sorted_lexicographically(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    ids = ["b", "a-1", "Z", "a", "é", "aa", "a0", "A", "_x", "9", "-", "ab~", "ÿ", "a b", "É"]
    for stream_id in ids:
        assert http.put(f"{shared.url}/{bucket_id}/{stream_id}", headers=TEXT).status_code == 201, stream_id
    listed = listed_ids(listing(http, shared, bucket_id))
    assert listed == sorted(ids)  # code point order, which is also UTF-8 byte order
    assert listed == sorted(ids, key=lambda stream_id: stream_id.encode("utf-8"))


def test_listing_prefix_and_after(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    ids = ["user-1", "user-2", "user-10", "user", "users", "admin-1", "zeta", "user-3"]
    for stream_id in ids:
        assert http.put(f"{shared.url}/{bucket_id}/{stream_id}", headers=TEXT).status_code == 201

    users = listing(http, shared, bucket_id, prefix="user-")
    assert users["prefix"] == "user-"
    assert listed_ids(users) == ["user-1", "user-10", "user-2", "user-3"]
    assert users["stream_count"] == 4 and users["has_more"] is False and users["next_cursor"] is None

    assert listed_ids(listing(http, shared, bucket_id, prefix="user")) == [
        "user",
        "user-1",
        "user-10",
        "user-2",
        "user-3",
        "users",
    ]
    nothing = listing(http, shared, bucket_id, prefix="nobody")
    assert listed_ids(nothing) == [] and nothing["stream_count"] == 0 and nothing["has_more"] is False
    assert listed_ids(listing(http, shared, bucket_id, prefix="")) == sorted(ids)

    # after is exclusive, whether or not it names an existing stream.
    assert listed_ids(listing(http, shared, bucket_id, after="user-10")) == ["user-2", "user-3", "users", "zeta"]
    assert listed_ids(listing(http, shared, bucket_id, after="user-15")) == ["user-2", "user-3", "users", "zeta"]
    assert listed_ids(listing(http, shared, bucket_id, after="a")) == sorted(ids)
    assert listed_ids(listing(http, shared, bucket_id, after="zeta")) == []
    assert listed_ids(listing(http, shared, bucket_id, prefix="user-", after="user-10")) == ["user-2", "user-3"]
    assert listed_ids(listing(http, shared, bucket_id, prefix="user-", after="user-3")) == []
    assert listed_ids(listing(http, shared, bucket_id, prefix="user-", after="admin")) == [
        "user-1",
        "user-10",
        "user-2",
        "user-3",
    ]

    page = listing(http, shared, bucket_id, prefix="user-", limit="3")
    assert listed_ids(page) == ["user-1", "user-10", "user-2"]
    assert page["has_more"] is True and page["next_cursor"] == "user-2" and page["stream_count"] == 3
    rest = listing(http, shared, bucket_id, prefix="user-", limit="3", after="user-2")
    assert listed_ids(rest) == ["user-3"] and rest["has_more"] is False and rest["next_cursor"] is None


@pytest.mark.parametrize("limit", ["0", "1001", "-1", "abc", "", "1.5", " 5", "1e3", "99999999999999999999"])
def test_listing_limit_must_be_1_to_1000(shared: ServerProcess, http: requests.Session, limit: str) -> None:
    bucket_id = new_bucket(http, shared)
    response = http.get(f"{shared.url}/{bucket_id}/streams", params={"limit": limit})
    assert response.status_code == 400, response.text


def test_listing_of_an_unknown_or_invalid_bucket(shared: ServerProcess, http: requests.Session) -> None:
    assert http.get(f"{shared.url}/nothing-{uuid.uuid4().hex[:8]}/streams").status_code == 404
    assert http.get(f"{shared.url}/NOPE/streams").status_code == 400


def _create_many(server: ServerProcess, bucket_id: str, ids: list[str], workers: int = 16) -> None:
    local = threading.local()

    def create(stream_id: str) -> int:
        if not hasattr(local, "http"):
            local.http = session()
        return int(local.http.put(f"{server.url}/{bucket_id}/{stream_id}").status_code)

    with ThreadPoolExecutor(workers) as pool:
        statuses = list(pool.map(create, ids))
    assert statuses == [201] * len(ids)


def _all_pages(http: requests.Session, server: ServerProcess, bucket_id: str, **params: str) -> list[list[str]]:
    pages: list[list[str]] = []
    after: str | None = None
    for _ in range(2000):
        query = dict(params) if after is None else {**params, "after": after}
        body = listing(http, server, bucket_id, **query)
        page = listed_ids(body)
        assert body["stream_count"] == len(page)
        pages.append(page)
        if not body["has_more"]:
            assert body["next_cursor"] is None
            return pages
        assert page, "has_more with an empty page"
        assert body["next_cursor"] == page[-1]
        after = str(body["next_cursor"])
    raise AssertionError("pagination did not end")


def test_pagination_across_1000_streams(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    ids = [f"stream-{uuid.uuid4().hex[:10]}" for _ in range(1000)]
    _create_many(shared, bucket_id, ids)
    expected = sorted(ids)

    pages = _all_pages(http, shared, bucket_id, limit="7")
    assert [len(page) for page in pages] == [7] * 142 + [6]
    collected = [stream_id for page in pages for stream_id in page]
    assert collected == expected  # no gaps, no repeats, in order

    # A limit that divides the count: the last page is full and says no more follow.
    pages = _all_pages(http, shared, bucket_id, limit="8")
    assert [len(page) for page in pages] == [8] * 125
    assert [stream_id for page in pages for stream_id in page] == expected

    # The default limit is 1000 (and 1000 is allowed explicitly).
    whole = listing(http, shared, bucket_id)
    assert listed_ids(whole) == expected and whole["has_more"] is False
    assert listed_ids(listing(http, shared, bucket_id, limit="1000")) == expected
    assert http.put(f"{shared.url}/{bucket_id}/{'~' * 3}").status_code == 201  # sorts after every "stream-"
    capped = listing(http, shared, bucket_id)
    assert listed_ids(capped) == expected
    assert capped["has_more"] is True and capped["next_cursor"] == expected[-1]
    assert listed_ids(listing(http, shared, bucket_id, after=expected[-1])) == ["~~~"]
    assert http.get(f"{shared.url}/{bucket_id}").json()["streams"] == 1001


def test_pagination_with_a_prefix(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    ids = [f"{group}-{index:03d}" for group in ("a", "b", "c") for index in range(50)]
    _create_many(shared, bucket_id, ids)
    pages = _all_pages(http, shared, bucket_id, prefix="b-", limit="9")
    assert [len(page) for page in pages] == [9] * 5 + [5]
    assert [stream_id for page in pages for stream_id in page] == [f"b-{index:03d}" for index in range(50)]
    pages = _all_pages(http, shared, bucket_id, prefix="c-", limit="10")
    assert [len(page) for page in pages] == [10] * 5  # the last page ends exactly at the prefix's end
    assert _all_pages(http, shared, bucket_id, prefix="b-01", limit="3") == [
        ["b-010", "b-011", "b-012"],
        ["b-013", "b-014", "b-015"],
        ["b-016", "b-017", "b-018"],
        ["b-019"],
    ]


def test_deleted_stream_leaves_the_listing(shared: ServerProcess, http: requests.Session) -> None:
    bucket_id = new_bucket(http, shared)
    for stream_id in ("a", "b", "c"):
        assert http.put(f"{shared.url}/{bucket_id}/{stream_id}", headers=TEXT).status_code == 201
    assert http.delete(f"{shared.url}/{bucket_id}/b").status_code == 204
    body = listing(http, shared, bucket_id)
    assert listed_ids(body) == ["a", "c"] and body["stream_count"] == 2
    page = listing(http, shared, bucket_id, limit="1")
    assert listed_ids(page) == ["a"] and page["next_cursor"] == "a"
    assert listed_ids(listing(http, shared, bucket_id, limit="1", after="a")) == ["c"]
    assert http.get(f"{shared.url}/{bucket_id}").json()["streams"] == 2


def test_listing_a_bucket_with_5000_streams(tmp_path: Path, http: requests.Session) -> None:
    """A page is a seek into the bucket, not a scan: checked for correctness near the end
    (timing is deliberately not asserted). 5,000 streams are five pages of the largest limit
    (1,000), so the pages asked for in the middle and near the end lie pages past any page's
    worth from the start; 20,000 took some 30 s to create and asserted nothing more."""
    server = ServerProcess(tmp_path / "data", ("--flush-interval-ms", "600000")).start()
    try:
        bucket_id = new_bucket(http, server)
        ids = [f"s{index:04d}" for index in range(5_000)]
        _create_many(server, bucket_id, ids)
        assert http.get(f"{server.url}/{bucket_id}").json()["streams"] == 5_000

        page = listing(http, server, bucket_id, limit="10", after="s4994")
        assert listed_ids(page) == ["s4995", "s4996", "s4997", "s4998", "s4999"]
        assert page["has_more"] is False and page["next_cursor"] is None

        middle = listing(http, server, bucket_id, limit="10", after="s2499")
        assert listed_ids(middle) == [f"s{index:04d}" for index in range(2_500, 2_510)]
        assert middle["has_more"] is True and middle["next_cursor"] == "s2509"

        near_end = listing(http, server, bucket_id, limit="10", prefix="s499")
        assert listed_ids(near_end) == [f"s{index:04d}" for index in range(4_990, 5_000)]
        assert near_end["has_more"] is False

        first = listing(http, server, bucket_id, limit="10")
        assert listed_ids(first) == ids[:10] and first["next_cursor"] == "s0009"
    finally:
        server.kill()
