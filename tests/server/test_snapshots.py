"""Snapshots (extensions spec section 2): publish, read, redirect, delete, HEAD metadata,
retention (410 below the snapshot for catch-up, long-poll and SSE), and publishing beside
concurrent appends; on both the bucketed surface and ``/v1/stream/{name}``.

Offsets are opaque to clients, but tests need tokens the server never handed out (beyond
the tail, inside a message): those are built from our format ``SSSS…_BBBB…`` (message
sequence, byte within the message), see ``protocol/offsets.py``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import requests
from multipart_parsing import get_bootstrap, raw_request, read_all_bytes
from servers import ServerProcess, once_a_long_poll_waits, session

TEXT = {"Content-Type": "text/plain"}
MAX_BODY_BYTES = 64 * 1024
BUCKET = "snapshots"


def token(seq: int, within: int = 0) -> str:
    return f"{seq:016d}_{within:016d}"


def seq_of(offset: str) -> int:
    return int(offset.split("_")[0])


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp("snapshots") / "data"
    args = ("--long-poll-timeout-ms", "1500", "--max-body-bytes", str(MAX_BODY_BYTES))
    server = ServerProcess(data_dir, args).start()
    try:  # (killed if the set-up fails too)
        assert session().put(f"{server.url}/{BUCKET}").status_code == 201
        yield server
    finally:
        server.kill()


@dataclass
class Surface:
    """Where new streams go: a bucket, or the base ``/v1/stream/`` surface."""

    name: str
    server: ServerProcess

    def new_url(self) -> str:
        stream_id = f"s-{uuid.uuid4().hex[:12]}"
        if self.name == "bucket":
            return f"{self.server.url}/{BUCKET}/{stream_id}"
        return f"{self.server.url}/v1/stream/{stream_id}"

    def path(self, url: str) -> str:
        return url.removeprefix(self.server.url)


@pytest.fixture(params=["bucket", "base"])
def surface(request: pytest.FixtureRequest, shared: ServerProcess) -> Surface:
    return Surface(request.param, shared)


@dataclass
class TextStream:
    url: str
    messages: list[str]
    offsets: list[str]
    """``offsets[i]`` is where message ``i`` starts; ``offsets[-1]`` is the tail."""


def text_stream(http: requests.Session, url: str, messages: list[str]) -> TextStream:
    created = http.put(url, headers=TEXT)
    assert created.status_code == 201, created.text
    offsets = [created.headers["Stream-Next-Offset"]]
    for message in messages:
        appended = http.post(url, headers=TEXT, data=message.encode())
        assert appended.status_code == 204, appended.text
        offsets.append(appended.headers["Stream-Next-Offset"])
    return TextStream(url, messages, offsets)


def publish(
    http: requests.Session, url: str, offset: str, body: bytes, content_type: str | None = None
) -> requests.Response:
    headers = {"Content-Type": content_type} if content_type else {}
    return http.put(f"{url}/snapshot/{offset}", data=body, headers=headers)


# -- publish -------------------------------------------------------------------------------


def test_publish_read_and_redirect(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["m0", "m1", "m2"])
    snapshot_at = stream.offsets[2]
    blob = b"\x00crdt state\r\n--\xff"
    published = publish(http, stream.url, snapshot_at, blob, "application/x-crdt")
    assert published.status_code == 204, published.text
    assert published.content == b""

    latest = http.get(f"{stream.url}/snapshot", allow_redirects=False)
    assert latest.status_code == 307
    location = latest.headers["Location"]
    assert location.endswith(f"/snapshot/{snapshot_at}")
    assert location in (f"{stream.url}/snapshot/{snapshot_at}", f"{surface.path(stream.url)}/snapshot/{snapshot_at}")

    followed = http.get(f"{stream.url}/snapshot")  # requests follows the 307
    assert followed.status_code == 200
    assert followed.url == f"{stream.url}/snapshot/{snapshot_at}"
    assert followed.content == blob
    assert followed.headers["Content-Type"] == "application/x-crdt"
    assert followed.headers["Stream-Snapshot-Offset"] == snapshot_at
    assert followed.headers["Stream-Next-Offset"] == snapshot_at  # the snapshot covers [-1, snapshot_at)
    assert followed.headers["Stream-Up-To-Date"] == "false"  # m2 lies beyond the snapshot

    head = http.head(stream.url)
    assert head.status_code == 200
    assert head.headers["Stream-Snapshot-Offset"] == snapshot_at

    # Reading data never returns snapshot bytes (section 3.4).
    assert http.get(stream.url, params={"offset": snapshot_at}).text == "m2"


def test_snapshot_at_the_tail_is_up_to_date(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["a", "b"])
    tail = stream.offsets[-1]
    assert publish(http, stream.url, tail, b"ab", "text/plain").status_code == 204
    read = http.get(f"{stream.url}/snapshot/{tail}")
    assert read.status_code == 200
    assert read.headers["Stream-Up-To-Date"] == "true"
    assert read.headers["Stream-Next-Offset"] == tail
    assert read.headers["Content-Type"] == "text/plain"
    assert http.post(stream.url, headers=TEXT, data="c").status_code == 204
    assert http.get(f"{stream.url}/snapshot/{tail}").headers["Stream-Up-To-Date"] == "false"


def test_snapshot_content_type_defaults_to_octet_stream(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["a"])
    response = http.put(f"{stream.url}/snapshot/{stream.offsets[1]}", data=b"raw")
    assert "Content-Type" not in response.request.headers
    assert response.status_code == 204
    read = http.get(f"{stream.url}/snapshot/{stream.offsets[1]}")
    assert read.headers["Content-Type"] == "application/octet-stream"
    assert read.content == b"raw"


def test_empty_snapshot_body(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["a"])
    assert publish(http, stream.url, stream.offsets[1], b"", "application/json").status_code == 204
    read = http.get(f"{stream.url}/snapshot/{stream.offsets[1]}")
    assert read.status_code == 200 and read.content == b""
    assert read.headers["Content-Type"] == "application/json"


def test_snapshot_offset_is_url_decoded(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["a", "b", "c"])
    path = surface.path(stream.url)
    first = stream.offsets[1]
    underscore_encoded = first.replace("_", "%5F")
    assert underscore_encoded != first
    published = raw_request(http_port(surface), "PUT", f"{path}/snapshot/{underscore_encoded}", b"one", TEXT)
    assert published.status == 204, published.body
    read = raw_request(http_port(surface), "GET", f"{path}/snapshot/{underscore_encoded}")
    assert read.status == 200 and read.body == b"one"
    assert read.headers["stream-snapshot-offset"] == first

    second = stream.offsets[2]
    every_byte_encoded = "".join(f"%{byte:02X}" for byte in second.encode())
    published = raw_request(http_port(surface), "PUT", f"{path}/snapshot/{every_byte_encoded}", b"two", TEXT)
    assert published.status == 204, published.body
    assert http.get(f"{stream.url}/snapshot/{second}").content == b"two"
    assert raw_request(http_port(surface), "DELETE", f"{path}/snapshot/{every_byte_encoded}").status == 409
    assert raw_request(http_port(surface), "DELETE", f"{path}/snapshot/{underscore_encoded}").status == 404


def http_port(surface: Surface) -> int:
    return surface.server.port


def test_snapshot_offset_inside_a_message_is_400(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["abcdef", "ghi"])
    inside = token(seq_of(stream.offsets[0]), 3)
    assert http.get(stream.url, params={"offset": inside}).text == "defghi"  # a real position...
    response = publish(http, stream.url, inside, b"s")
    assert response.status_code == 400  # ...but not a message boundary
    assert http.get(f"{stream.url}/snapshot", allow_redirects=False).status_code == 404
    assert "Stream-Snapshot-Offset" not in http.head(stream.url).headers


@pytest.mark.parametrize(
    "offset",
    [
        "garbage",
        "0000000000000001",
        "0000000000000001_",
        "0000000000000001-0000000000000000",
        "000000000000000x_0000000000000000",
        "00000000000000001_0000000000000000",
        "+000000000000001_0000000000000000",
        "%20",
    ],
)
def test_malformed_snapshot_offset_is_400(surface: Surface, http: requests.Session, offset: str) -> None:
    stream = text_stream(http, surface.new_url(), ["a"])
    assert publish(http, stream.url, offset, b"s").status_code == 400
    read = http.get(f"{stream.url}/snapshot/{offset}")
    assert (read.status_code, read.json()["error"]["code"]) == (400, "INVALID_OFFSET")
    assert http.get(f"{stream.url}/snapshot", allow_redirects=False).status_code == 404


def test_snapshot_beyond_the_tail_is_409(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["a", "b"])
    beyond = token(seq_of(stream.offsets[-1]) + 1)
    assert publish(http, stream.url, beyond, b"s").status_code == 409
    assert publish(http, stream.url, token(10**15), b"s").status_code == 409
    assert "Stream-Snapshot-Offset" not in http.head(stream.url).headers


def test_snapshot_older_than_the_current_one_is_410(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["a", "b", "c"])
    assert publish(http, stream.url, stream.offsets[2], b"two").status_code == 204
    assert publish(http, stream.url, stream.offsets[1], b"one").status_code == 410
    assert publish(http, stream.url, stream.offsets[0], b"zero").status_code == 410
    assert http.head(stream.url).headers["Stream-Snapshot-Offset"] == stream.offsets[2]
    assert http.get(f"{stream.url}/snapshot").content == b"two"


def test_snapshot_of_a_missing_stream_is_404(shared: ServerProcess, http: requests.Session) -> None:
    url = f"{shared.url}/{BUCKET}/missing-{uuid.uuid4().hex[:8]}"
    assert publish(http, url, token(0), b"s").status_code == 404
    assert http.get(f"{url}/snapshot", allow_redirects=False).status_code == 404
    assert http.get(f"{url}/snapshot/{token(0)}").status_code == 404
    assert http.delete(f"{url}/snapshot/{token(0)}").status_code == 404
    assert http.head(url).status_code == 404
    missing_bucket = f"{shared.url}/nobucket-{uuid.uuid4().hex[:8]}/s"
    assert publish(http, missing_bucket, token(0), b"s").status_code == 404


def test_snapshot_of_a_missing_base_stream_is_404(shared: ServerProcess, http: requests.Session) -> None:
    url = f"{shared.url}/v1/stream/missing-{uuid.uuid4().hex[:8]}"
    assert publish(http, url, token(0), b"s").status_code == 404
    assert http.head(f"{url}/snapshot/{token(0)}").status_code == 404


def test_missing_base_stream_snapshot_reads_are_404(shared: ServerProcess, http: requests.Session) -> None:
    url = f"{shared.url}/v1/stream/missing-{uuid.uuid4().hex[:8]}"
    assert http.get(f"{url}/snapshot", allow_redirects=False).status_code == 404
    assert http.get(f"{url}/snapshot/{token(0)}").status_code == 404
    assert http.delete(f"{url}/snapshot/{token(0)}").status_code == 404


def test_snapshot_over_the_body_limit_is_413(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["a"])
    at = stream.offsets[1]
    assert publish(http, stream.url, at, b"x" * (MAX_BODY_BYTES + 1)).status_code == 413

    def chunked() -> Iterator[bytes]:  # no Content-Length: the limit must hold while reading
        for _ in range(MAX_BODY_BYTES // 1024 + 1):
            yield b"y" * 1024

    assert http.put(f"{stream.url}/snapshot/{at}", data=chunked()).status_code == 413
    assert http.get(f"{stream.url}/snapshot", allow_redirects=False).status_code == 404
    assert publish(http, stream.url, at, b"z" * MAX_BODY_BYTES).status_code == 204
    assert http.get(f"{stream.url}/snapshot/{at}").content == b"z" * MAX_BODY_BYTES


# -- latest, superseded, delete --------------------------------------------------------------


def test_no_snapshot_means_404_and_no_head_header(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["a"])
    assert http.get(f"{stream.url}/snapshot", allow_redirects=False).status_code == 404
    assert http.get(f"{stream.url}/snapshot/{stream.offsets[1]}").status_code == 404
    assert http.delete(f"{stream.url}/snapshot/{stream.offsets[1]}").status_code == 404
    head = http.head(stream.url)
    assert head.status_code == 200
    assert "Stream-Snapshot-Offset" not in head.headers


def test_superseded_snapshot_is_gone_and_latest_cannot_be_deleted(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["a", "b", "c"])
    old, new = stream.offsets[1], stream.offsets[3]
    assert publish(http, stream.url, old, b"old", "text/x-old").status_code == 204
    assert http.head(stream.url).headers["Stream-Snapshot-Offset"] == old
    assert publish(http, stream.url, new, b"new", "text/x-new").status_code == 204

    assert http.get(f"{stream.url}/snapshot/{old}").status_code == 404
    latest = http.get(f"{stream.url}/snapshot", allow_redirects=False)
    assert latest.headers["Location"].endswith(f"/snapshot/{new}")
    assert http.head(stream.url).headers["Stream-Snapshot-Offset"] == new  # same as the redirect
    read = http.get(f"{stream.url}/snapshot/{new}")
    assert (read.content, read.headers["Content-Type"]) == (b"new", "text/x-new")

    assert http.delete(f"{stream.url}/snapshot/{old}").status_code == 404
    assert http.delete(f"{stream.url}/snapshot/{new}").status_code == 409
    assert http.delete(f"{stream.url}/snapshot/{stream.offsets[2]}").status_code == 404  # never a snapshot
    assert http.get(f"{stream.url}/snapshot/{new}").content == b"new"  # the refused delete changed nothing


def test_republishing_replaces_the_snapshot(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["a", "b"])
    at = stream.offsets[1]
    assert publish(http, stream.url, at, b"first", "text/x-1").status_code == 204
    assert publish(http, stream.url, at, b"second", "text/x-2").status_code == 204
    read = http.get(f"{stream.url}/snapshot/{at}")
    assert (read.content, read.headers["Content-Type"]) == (b"second", "text/x-2")


def test_snapshot_of_a_deleted_stream_is_gone_with_it(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["a"])
    assert publish(http, stream.url, stream.offsets[1], b"s").status_code == 204
    assert http.delete(stream.url).status_code == 204
    assert http.get(f"{stream.url}/snapshot", allow_redirects=False).status_code == 404
    assert http.get(f"{stream.url}/snapshot/{stream.offsets[1]}").status_code == 404
    assert http.put(stream.url, headers=TEXT).status_code == 201  # a new stream at the same URL
    assert http.get(f"{stream.url}/snapshot", allow_redirects=False).status_code == 404
    assert "Stream-Snapshot-Offset" not in http.head(stream.url).headers
    assert http.get(stream.url, params={"offset": "-1"}).status_code == 200  # no retention inherited


# -- retention ---------------------------------------------------------------------------------


def test_reads_below_the_snapshot_are_gone(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["m0", "m1", "m2", "m3"])
    assert http.get(stream.url, params={"offset": "-1"}).text == "m0m1m2m3"
    snapshot_at = stream.offsets[2]
    assert publish(http, stream.url, snapshot_at, b"m0m1").status_code == 204

    for offset in ("-1", stream.offsets[0], stream.offsets[1], token(seq_of(stream.offsets[1]), 1)):
        assert http.get(stream.url, params={"offset": offset}).status_code == 410, offset
        long_poll = http.get(stream.url, params={"offset": offset, "live": "long-poll"}, timeout=10)
        assert long_poll.status_code == 410, offset
    assert http.get(stream.url).status_code == 410  # no offset means -1

    at_snapshot = http.get(stream.url, params={"offset": snapshot_at})
    assert at_snapshot.status_code == 200
    assert at_snapshot.text == "m2m3"
    assert http.get(stream.url, params={"offset": stream.offsets[3]}).text == "m3"
    assert http.get(stream.url, params={"offset": "now"}).headers["Stream-Next-Offset"] == stream.offsets[-1]
    inside_m2 = http.get(stream.url, params={"offset": token(seq_of(snapshot_at), 1)})
    assert inside_m2.status_code == 200 and inside_m2.text == "2m3"
    assert read_all_bytes(http, stream.url, snapshot_at) == (b"m2m3", stream.offsets[-1])
    assert http.head(stream.url).status_code == 200


def test_long_poll_and_sse_at_or_after_the_snapshot_work(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["m0", "m1", "m2"])
    snapshot_at = stream.offsets[1]
    assert publish(http, stream.url, snapshot_at, b"m0").status_code == 204

    immediate = http.get(stream.url, params={"offset": snapshot_at, "live": "long-poll"})
    assert immediate.status_code == 200 and immediate.text == "m1m2"

    def append() -> None:
        assert session().post(stream.url, headers=TEXT, data="m3").status_code == 204

    writer = once_a_long_poll_waits(stream.url, append)
    waited = http.get(stream.url, params={"offset": stream.offsets[-1], "live": "long-poll"}, timeout=10)
    writer.join()
    assert waited.status_code == 200 and waited.text == "m3"

    with http.get(stream.url, params={"offset": snapshot_at, "live": "sse"}, stream=True, timeout=10) as response:
        assert response.status_code == 200
        received = b""
        for line in response.iter_lines():
            if line.startswith(b"data:m"):
                received += line[len(b"data:") :]
            if b'"upToDate":true' in line:
                break
    assert received == b"m1m2m3"


@pytest.mark.parametrize("offset_index", [None, 0])
def test_sse_below_the_snapshot_is_gone(surface: Surface, http: requests.Session, offset_index: int | None) -> None:
    stream = text_stream(http, surface.new_url(), ["m0", "m1", "m2"])
    assert publish(http, stream.url, stream.offsets[2], b"m0m1").status_code == 204
    offset = "-1" if offset_index is None else stream.offsets[offset_index]
    with http.get(stream.url, params={"offset": offset, "live": "sse"}, stream=True, timeout=10) as response:
        assert response.status_code == 410


def test_bootstrap_covers_the_earliest_retained_offset(surface: Surface, http: requests.Session) -> None:
    """Section 3.4: once reads answer 410, /bootstrap provides a snapshot covering that point."""
    stream = text_stream(http, surface.new_url(), ["m0", "m1", "m2"])
    assert publish(http, stream.url, stream.offsets[2], b"m0m1", "text/x-folded").status_code == 204
    assert http.get(stream.url, params={"offset": stream.offsets[1]}).status_code == 410
    bootstrap = get_bootstrap(http, stream.url)
    assert bootstrap.snapshot_offset == stream.offsets[2]
    assert (bootstrap.snapshot.content_type, bootstrap.snapshot.body) == ("text/x-folded", b"m0m1")
    assert bootstrap.update_bodies == [b"m2"]
    assert bootstrap.next_offset == stream.offsets[-1]


# -- concurrency -------------------------------------------------------------------------------


def test_publishing_snapshots_does_not_block_appends(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), ["seed"])
    tails: list[str] = [stream.offsets[1]]  # tails[i + 1]: the tail after appended message i
    appended: list[str] = []
    stop = threading.Event()
    errors: list[str] = []

    def appender() -> None:
        writer = session()
        index = 0
        while not stop.is_set() or index < 50:
            message = f"<{index}>"
            response = writer.post(stream.url, headers=TEXT, data=message)
            if response.status_code != 204:
                errors.append(f"{index}: {response.status_code} {response.text}")
                return
            tails.append(response.headers["Stream-Next-Offset"])  # before ``appended``: see the reader
            appended.append(message)
            index += 1

    thread = threading.Thread(target=appender)
    thread.start()
    published: list[tuple[str, int]] = []
    deadline = time.monotonic() + 20
    while len(published) < 15 and time.monotonic() < deadline:
        count = len(appended)
        if count == 0 or (published and count == published[-1][1]):
            time.sleep(0.005)  # (a poll in a loop that checks: no append acknowledged since the last publish)
            continue
        at = tails[count]  # a committed boundary; the appender keeps going past it
        response = publish(http, stream.url, at, f"folded {count}".encode(), "text/x-folded")
        assert response.status_code == 204, response.text
        published.append((at, count))
    stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert errors == []
    assert len(published) == 15
    assert len(appended) >= 50
    assert appended == [f"<{index}>" for index in range(len(appended))]
    assert len(set(tails)) == len(tails)  # every append acknowledged with its own, growing tail
    assert tails == sorted(tails)
    # Appends went on between the first and the last snapshot.
    assert published[-1][1] > published[0][1]

    last_at, last_count = published[-1]
    expected_after = "".join(appended[last_count:])
    assert read_all_bytes(http, stream.url, last_at) == (expected_after.encode(), tails[-1])
    bootstrap = get_bootstrap(http, stream.url)
    assert bootstrap.snapshot_offset == last_at
    assert bootstrap.snapshot.body == f"folded {last_count}".encode()
    assert [body.decode() for body in bootstrap.update_bodies] == appended[last_count:]
    assert bootstrap.next_offset == tails[-1]
    earlier_at = published[0][0]
    assert http.get(stream.url, params={"offset": earlier_at}).status_code == 410


def test_concurrent_publishers_leave_one_consistent_latest(surface: Surface, http: requests.Session) -> None:
    stream = text_stream(http, surface.new_url(), [f"m{index}" for index in range(20)])
    results: dict[int, int] = {}

    def publisher(index: int) -> Callable[[], None]:
        def run() -> None:
            results[index] = (
                session().put(f"{stream.url}/snapshot/{stream.offsets[index]}", data=b"%d" % index).status_code
            )

        return run

    threads = [threading.Thread(target=publisher(index)) for index in range(1, 21)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(results.values()) <= {204, 410}
    assert results[20] == 204  # the newest offset can never be older than the current snapshot
    head = http.head(stream.url).headers["Stream-Snapshot-Offset"]
    assert head == stream.offsets[20]
    assert http.get(f"{stream.url}/snapshot").content == b"20"
