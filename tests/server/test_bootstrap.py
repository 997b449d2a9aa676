"""Bootstrap (extensions spec section 3) and the multipart read extension on ordinary
reads (``Accept: multipart/mixed``), parsed with the strict RFC 2046 parser in
``tests/multipart_parsing.py``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import requests
from multipart_parsing import (
    MultipartError,
    Part,
    boundary_of,
    get_bootstrap,
    parse_multipart,
    read_all_bytes,
    read_all_parts,
)
from servers import (
    ServerProcess,
    append_all,
    once_a_long_poll_waits,
    session,
    settled_wal_segments,
    wait_until_wal_flushed,
)

TEXT = {"Content-Type": "text/plain"}
BINARY = {"Content-Type": "application/octet-stream"}
JSON = {"Content-Type": "application/json"}
BUCKET = "bootstrap"

TRICKY_MESSAGES = [
    b"\r\n",
    b"--",
    b"\r\n--",
    b"\r\n--ds-",
    b"--ds-\r\n",
    b"\r\n--ds-0123456789abcdef0123456789abcdef0123456789abcdef\r\n",
    b"\r\n--ds-0123456789abcdef0123456789abcdef0123456789abcdef--\r\n",
    b"Content-Type: text/plain\r\n\r\nnot a header",
    b"\r\n\r\n",
    b"\n--ds-\n",
    b"\r",
    b"\x00",
    bytes(range(256)),
    b"ends with CR LF\r\n",
    b"-",
]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp("bootstrap") / "data"
    server = ServerProcess(data_dir, ("--long-poll-timeout-ms", "3000")).start()
    try:  # (killed if the set-up fails too)
        assert session().put(f"{server.url}/{BUCKET}").status_code == 201
        yield server
    finally:
        server.kill()


@pytest.fixture(params=["bucket", "base"])
def new_url(request: pytest.FixtureRequest, shared: ServerProcess) -> Callable[[], str]:
    def make() -> str:
        stream_id = f"s-{uuid.uuid4().hex[:12]}"
        if request.param == "bucket":
            return f"{shared.url}/{BUCKET}/{stream_id}"
        return f"{shared.url}/v1/stream/{stream_id}"

    return make


def create(http: requests.Session, url: str, headers: dict[str, str]) -> str:
    response = http.put(url, headers=headers)
    assert response.status_code == 201, response.text
    return response.headers["Stream-Next-Offset"]


# -- the parser itself -----------------------------------------------------------------------


def test_parser_reads_rfc_2046_framing() -> None:
    body = (
        b"--b1\r\nContent-Type: text/plain\r\n\r\nfirst\r\n"
        b"--b1   \r\nContent-Type: x/y\r\nX-Extra: 1\r\n\r\n--b2\r\n\r\n"
        b"--b1\r\n\r\nno headers\r\n"
        b"--b1\r\n\r\n"
        b"--b1--\r\n"
    )
    parts = parse_multipart('multipart/mixed; boundary="b1"', body)
    assert parts == [
        Part({"content-type": "text/plain"}, b"first"),
        Part({"content-type": "x/y", "x-extra": "1"}, b"--b2\r\n"),
        Part({}, b"no headers"),
        Part({}, b""),
    ]
    assert boundary_of("Multipart/Mixed;boundary=ds-abc") == "ds-abc"


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("multipart/mixed; boundary=b", b"--b\r\n\r\nunterminated"),
        ("multipart/mixed; boundary=b", b"preamble\r\n--b\r\n\r\nx\r\n--b--"),
        ("multipart/mixed; boundary=b", b"--b\r\n\r\nx\r\n--bx\r\n\r\ny\r\n--b--"),
        ("multipart/mixed; boundary=b", b"--b\r\n\r\nx\r\n--b--\r\ntrailing"),
        ("multipart/mixed; boundary=b", b"--b\r\nbad header\r\n\r\nx\r\n--b--"),
        ("multipart/mixed; boundary=b", b"--b\nContent-Type: a/b\n\nx\n--b--"),
        ("multipart/mixed", b"--b\r\n\r\nx\r\n--b--"),
        ("multipart/related; boundary=b", b"--b\r\n\r\nx\r\n--b--"),
    ],
)
def test_parser_rejects_malformed_entities(content_type: str, body: bytes) -> None:
    with pytest.raises(MultipartError):
        parse_multipart(content_type, body)


# -- bootstrap -------------------------------------------------------------------------------


def test_bootstrap_without_a_snapshot(new_url: Callable[[], str], http: requests.Session) -> None:
    url = new_url()
    create(http, url, TEXT)
    tails = append_all(http, url, TEXT, [b"alpha", b"beta", b"gamma"])
    response = http.get(f"{url}/bootstrap")
    assert response.status_code == 200
    content_type = response.headers["Content-Type"]
    assert content_type.startswith("multipart/mixed;")
    assert boundary_of(content_type)
    assert response.headers["Stream-Snapshot-Offset"] == "-1"
    assert response.headers["Stream-Next-Offset"] == tails[-1]
    assert response.headers["Stream-Up-To-Date"] == "true"
    parts = parse_multipart(content_type, response.content)
    assert len(parts) == 4
    assert parts[0].content_type == "application/octet-stream"
    assert parts[0].body == b""
    assert [part.body for part in parts[1:]] == [b"alpha", b"beta", b"gamma"]
    assert [part.content_type for part in parts[1:]] == ["text/plain"] * 3


def test_bootstrap_of_an_empty_stream(new_url: Callable[[], str], http: requests.Session) -> None:
    url = new_url()
    tail = create(http, url, {"Content-Type": "application/x-custom"})
    bootstrap = get_bootstrap(http, url)
    assert bootstrap.snapshot_offset == "-1"
    assert bootstrap.next_offset == tail
    assert bootstrap.snapshot == Part({"content-type": "application/octet-stream"}, b"")
    assert bootstrap.updates == []


def test_bootstrap_with_a_snapshot(new_url: Callable[[], str], http: requests.Session) -> None:
    url = new_url()
    create(http, url, TEXT)
    tails = append_all(http, url, TEXT, [b"m0", b"m1", b"m2", b"m3"])
    snapshot_at = tails[1]  # covers m0 and m1
    published = http.put(f"{url}/snapshot/{snapshot_at}", data=b"{m0,m1}", headers={"Content-Type": "text/x-set"})
    assert published.status_code == 204
    bootstrap = get_bootstrap(http, url)
    assert bootstrap.snapshot_offset == snapshot_at
    assert bootstrap.snapshot.content_type == "text/x-set"
    assert bootstrap.snapshot.body == b"{m0,m1}"
    assert bootstrap.update_bodies == [b"m2", b"m3"]
    assert [part.content_type for part in bootstrap.updates] == ["text/plain", "text/plain"]
    assert bootstrap.next_offset == tails[-1]
    assert bootstrap.up_to_date == "true"

    # A snapshot at the tail: the snapshot part alone.
    assert http.put(f"{url}/snapshot/{tails[-1]}", data=b"{all}").status_code == 204
    at_tail = get_bootstrap(http, url)
    assert at_tail.snapshot == Part({"content-type": "application/octet-stream"}, b"{all}")
    assert at_tail.updates == []
    assert at_tail.snapshot_offset == at_tail.next_offset == tails[-1]


@pytest.mark.parametrize("live", ["sse", "long-poll", "true", ""])
def test_bootstrap_rejects_live(new_url: Callable[[], str], http: requests.Session, live: str) -> None:
    url = new_url()
    create(http, url, TEXT)
    append_all(http, url, TEXT, [b"x"])
    assert http.get(f"{url}/bootstrap", params={"live": live}).status_code == 400
    assert http.get(f"{url}/bootstrap").status_code == 200


def test_bootstrap_of_a_missing_stream_is_404(shared: ServerProcess, http: requests.Session) -> None:
    assert http.get(f"{shared.url}/{BUCKET}/missing-{uuid.uuid4().hex[:8]}/bootstrap").status_code == 404
    assert http.get(f"{shared.url}/nobucket-{uuid.uuid4().hex[:6]}/s/bootstrap").status_code == 404
    assert http.get(f"{shared.url}/v1/stream/missing-{uuid.uuid4().hex[:8]}/bootstrap").status_code == 404


def test_binary_messages_round_trip_byte_exactly(new_url: Callable[[], str], http: requests.Session) -> None:
    url = new_url()
    create(http, url, BINARY)
    tails = append_all(http, url, BINARY, TRICKY_MESSAGES)
    bootstrap = get_bootstrap(http, url)
    assert bootstrap.update_bodies == TRICKY_MESSAGES
    assert {part.content_type for part in bootstrap.updates} == {"application/octet-stream"}
    assert bootstrap.next_offset == tails[-1]

    snapshot_blob = b"".join(TRICKY_MESSAGES[:5]) + b"\r\n--" + boundary_of(bootstrap.content_type).encode()[:-1]
    assert http.put(f"{url}/snapshot/{tails[4]}", data=snapshot_blob, headers=BINARY).status_code == 204
    after = get_bootstrap(http, url)
    assert after.snapshot.body == snapshot_blob
    assert after.update_bodies == TRICKY_MESSAGES[5:]

    parts, next_offset = read_all_parts(http, url, tails[4])
    assert [part.body for part in parts] == TRICKY_MESSAGES[5:]
    assert next_offset == tails[-1]


def test_json_stream_gives_one_value_per_part(new_url: Callable[[], str], http: requests.Session) -> None:
    url = new_url()
    create(http, url, JSON)
    values: list[object] = [
        {"op": "set", "path": ["title"], "value": "hello"},
        [1, 2],
        "text",
        3,
        None,
        {"n": "\r\n--"},
    ]
    assert http.post(url, headers=JSON, data=json.dumps(values[:3])).status_code == 204  # an array: 3 messages
    assert http.post(url, headers=JSON, data=json.dumps([values[3]])).status_code == 204
    assert http.post(url, headers=JSON, data=json.dumps(values[4:])).status_code == 204
    bootstrap = get_bootstrap(http, url)
    assert [json.loads(part.body) for part in bootstrap.updates] == values
    assert {part.content_type for part in bootstrap.updates} == {"application/json"}


def test_bootstrap_then_resume_without_gap_or_duplicate(new_url: Callable[[], str], http: requests.Session) -> None:
    url = new_url()
    create(http, url, TEXT)
    messages = [f"<{index}>".encode() for index in range(12)]
    tails = append_all(http, url, TEXT, messages[:8])
    assert http.put(f"{url}/snapshot/{tails[2]}", data=b"<0-2>").status_code == 204  # covers messages 0..2
    bootstrap = get_bootstrap(http, url)
    assert bootstrap.update_bodies == messages[3:8]

    append_all(http, url, TEXT, messages[8:11])
    parts, offset = read_all_parts(http, url, bootstrap.next_offset)
    assert bootstrap.update_bodies + [part.body for part in parts] == messages[3:11]
    assert read_all_bytes(http, url, bootstrap.next_offset)[0] == b"".join(messages[8:11])

    # Tailing live from where the reads stopped picks up exactly the next message.
    writer = once_a_long_poll_waits(url, lambda: append_all(session(), url, TEXT, messages[11:]))
    live = http.get(url, params={"offset": offset, "live": "long-poll"}, timeout=10)
    writer.join()
    assert live.status_code == 200 and live.content == messages[11]
    assert get_bootstrap(http, url).update_bodies == messages[3:]


def test_bootstrap_and_resume_from_delta(server_factory: Callable[..., ServerProcess], http: requests.Session) -> None:
    server = server_factory("--flush-interval-ms", "50", "--tail-cache-bytes", "0", "--compaction-interval-s", "0")
    initial = settled_wal_segments(server.data_dir)
    assert http.put(f"{server.url}/{BUCKET}").status_code == 201
    url = f"{server.url}/{BUCKET}/from-delta"
    create(http, url, BINARY)
    messages = [*TRICKY_MESSAGES, *(b"m%d" % index for index in range(30))]
    tails = append_all(http, url, BINARY, messages)
    snapshot_at = tails[9]  # covers messages 0..9
    assert http.put(f"{url}/snapshot/{snapshot_at}", data=b"\r\n--folded", headers=BINARY).status_code == 204
    wait_until_wal_flushed(server.data_dir, initial)

    bootstrap = get_bootstrap(http, url)
    assert bootstrap.snapshot == Part({"content-type": "application/octet-stream"}, b"\r\n--folded")
    assert bootstrap.snapshot_offset == snapshot_at
    assert bootstrap.update_bodies == messages[10:]
    assert bootstrap.next_offset == tails[-1]
    assert http.get(url, params={"offset": tails[8]}).status_code == 410

    more = [b"after-1", b"\r\n--after-2"]
    append_all(http, url, BINARY, more)
    parts, _ = read_all_parts(http, url, bootstrap.next_offset)
    assert bootstrap.update_bodies + [part.body for part in parts] == messages[10:] + more
    parts_from_snapshot, _ = read_all_parts(http, url, snapshot_at)
    assert [part.body for part in parts_from_snapshot] == messages[10:] + more


# -- the multipart read extension ---------------------------------------------------------------


def test_multipart_reads_frame_each_message(new_url: Callable[[], str], http: requests.Session) -> None:
    url = new_url()
    start = create(http, url, BINARY)
    before_ms = int(time.time() * 1000)
    tails = append_all(http, url, BINARY, TRICKY_MESSAGES)
    after_ms = int(time.time() * 1000)
    starts = [start, *tails[:-1]]  # where each message begins

    response = http.get(url, params={"offset": start}, headers={"Accept": "multipart/mixed"})
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("multipart/mixed;")
    assert response.headers["Stream-Next-Offset"] == tails[-1]
    assert response.headers["Stream-Up-To-Date"] == "true"
    parts = parse_multipart(response.headers["Content-Type"], response.content)
    assert [part.body for part in parts] == TRICKY_MESSAGES
    assert [part.header("Stream-Offset") for part in parts] == starts
    assert parts[0].header("Stream-Offset") == start  # the requested offset
    assert {part.content_type for part in parts} == {"application/octet-stream"}
    stamps = [int(part.header("Stream-Timestamp")) for part in parts]
    assert stamps == sorted(stamps)
    assert all(before_ms - 1000 <= stamp <= after_ms + 1000 for stamp in stamps)

    # Every part's offset resumes a read at exactly that message.
    for index in (1, 7, len(parts) - 1):
        resumed = http.get(
            url, params={"offset": parts[index].header("Stream-Offset")}, headers={"Accept": "multipart/mixed"}
        )
        resumed_parts = parse_multipart(resumed.headers["Content-Type"], resumed.content)
        assert [part.body for part in resumed_parts] == TRICKY_MESSAGES[index:]
        assert [part.header("Stream-Offset") for part in resumed_parts] == starts[index:]

    # Without the Accept header: the ordinary body.
    plain = http.get(url, params={"offset": start})
    assert plain.headers["Content-Type"] == "application/octet-stream"
    assert plain.content == b"".join(TRICKY_MESSAGES)
    assert plain.headers["Stream-Next-Offset"] == tails[-1]


def test_multipart_read_from_an_offset_inside_a_message(new_url: Callable[[], str], http: requests.Session) -> None:
    url = new_url()
    start = create(http, url, TEXT)
    tails = append_all(http, url, TEXT, [b"abcdef", b"ghi"])
    inside = f"{start.split('_')[0]}_{3:016d}"  # byte 3 of the first message
    response = http.get(url, params={"offset": inside}, headers={"Accept": "multipart/mixed"})
    parts = parse_multipart(response.headers["Content-Type"], response.content)
    assert [part.body for part in parts] == [b"def", b"ghi"]
    assert [part.header("Stream-Offset") for part in parts] == [inside, tails[0]]


def test_multipart_json_and_long_poll(new_url: Callable[[], str], http: requests.Session) -> None:
    url = new_url()
    start = create(http, url, JSON)
    assert http.post(url, headers=JSON, data='[{"a": 1}, {"b": 2}]').status_code == 204
    response = http.get(url, params={"offset": start}, headers={"Accept": "multipart/mixed"})
    parts = parse_multipart(response.headers["Content-Type"], response.content)
    assert [json.loads(part.body) for part in parts] == [{"a": 1}, {"b": 2}]
    assert {part.content_type for part in parts} == {"application/json"}
    plain = http.get(url, params={"offset": start})
    assert plain.json() == [{"a": 1}, {"b": 2}]

    tail = response.headers["Stream-Next-Offset"]

    def append() -> None:
        assert session().post(url, headers=JSON, data='[{"c": 3}, {"d": 4}]').status_code == 204

    writer = once_a_long_poll_waits(url, append)
    live = http.get(
        url, params={"offset": tail, "live": "long-poll"}, headers={"Accept": "multipart/mixed"}, timeout=10
    )
    writer.join()
    assert live.status_code == 200
    live_parts = parse_multipart(live.headers["Content-Type"], live.content)
    assert [json.loads(part.body) for part in live_parts] == [{"c": 3}, {"d": 4}]
    assert live_parts[0].header("Stream-Offset") == tail
