"""The bulk append extension: ``Content-Type: application/vnd.apache.arrow.stream`` plus
``Stream-Bulk-Content-Type`` carries many messages (one per row of a ``data`` column), each
stored as its own message with its own offset, byte for byte, and the protocol's rules hold
per request: content type, Stream-Seq, Stream-Closed, idempotent producers, JSON validation,
empty batches, body limits. A refused request stores nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from deltalake import DeltaTable
from multipart_parsing import read_all_parts
from servers import ServerProcess, flushed, read_all, wait_for

ARROW = "application/vnd.apache.arrow.stream"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the tests that each use their own stream and read only it back (the
    restarts some make are graceful: every other test's streams survive them); a test
    that counts what the whole table holds, or needs other settings, starts its own."""
    server = ServerProcess(tmp_path_factory.mktemp("bulk") / "data", ("--long-poll-timeout-ms", "500")).start()
    yield server
    server.kill()


def arrow_body(messages: list[bytes], *, large: bool = False, chunks: int = 1) -> bytes:
    kind = pa.large_binary() if large else pa.binary()
    sink = pa.BufferOutputStream()
    schema = pa.schema([pa.field("data", kind)])
    with pa.ipc.new_stream(sink, schema) as writer:
        step = max(1, -(-len(messages) // chunks))
        for start in range(0, max(len(messages), 1), step):
            writer.write_batch(pa.record_batch([pa.array(messages[start : start + step], kind)], schema=schema))
    return sink.getvalue().to_pybytes()


def bulk_post(
    http: requests.Session, url: str, messages: list[bytes], content_type: str, **headers: str
) -> requests.Response:
    return http.post(
        url,
        data=arrow_body(messages),
        headers={"Content-Type": ARROW, "Stream-Bulk-Content-Type": content_type, **headers},
        timeout=60,
    )


def create(http: requests.Session, url: str, content_type: str) -> None:
    response = http.put(url, headers={"Content-Type": content_type}, timeout=10)
    assert response.status_code == 201, response.text


def multipart_messages(http: requests.Session, url: str) -> list[bytes]:
    """Every message of the stream with its boundaries (the multipart read extension)."""
    return [part.body for part in read_all_parts(http, url, "-1")[0]]


def arrow_messages(http: requests.Session, url: str) -> tuple[list[bytes], list[int]]:
    """Every message's bytes and seq through the Arrow read extension."""
    offset, data, seqs = "-1", [], []
    while True:
        response = http.get(url, params={"offset": offset}, headers={"Accept": ARROW}, timeout=30)
        assert response.status_code == 200, response.text
        table = pa.ipc.open_stream(response.content).read_all()
        data.extend(table["data"].to_pylist())
        seqs.extend(table["seq"].to_pylist())
        offset = response.headers["Stream-Next-Offset"]
        if response.headers.get("Stream-Up-To-Date") == "true":
            return data, seqs


TRICKY = [b"a", b"\r\n", b"\x00", b"--", b"--boundary\r\n\r\n", b"\x00\xff\xfe", "héllo".encode(), b"x" * 1000]


@pytest.mark.parametrize("content_type", ["application/octet-stream", "text/plain", "application/x-ndjson"])
def test_byte_streams_round_trip_exact_boundaries(
    shared: ServerProcess, http: requests.Session, content_type: str
) -> None:
    url = shared.stream_url(f"bulk-{content_type.replace('/', '-')}")
    create(http, url, content_type)
    response = bulk_post(http, url, TRICKY, content_type)
    assert response.status_code == 204, response.text
    assert response.headers["Stream-Next-Offset"] == f"{len(TRICKY):016d}_0000000000000000"
    response = bulk_post(http, url, TRICKY[::-1], content_type)
    assert response.status_code == 204, response.text
    expected = TRICKY + TRICKY[::-1]
    assert multipart_messages(http, url) == expected
    assert read_all(http, url) == b"".join(expected)
    data, seqs = arrow_messages(http, url)
    assert data == expected and seqs == list(range(len(expected)))
    # each message is readable from its own offset
    for seq in (0, 3, len(expected) - 1):
        response = http.get(url, params={"offset": f"{seq:016d}_0000000000000000"}, timeout=10)
        assert response.content == b"".join(expected[seq:])
    # and the same after the flush, from Delta (restart: the memory tail is gone)
    wait_for(flushed(shared))
    shared.restart()
    assert multipart_messages(http, url) == expected
    assert arrow_messages(http, url)[0] == expected


def test_json_stream_round_trip(shared: ServerProcess, http: requests.Session) -> None:
    url = shared.stream_url("bulk-json")
    create(http, url, "application/json")
    messages = [b'{"a":1}', b"[1, 2, 3]", b'"str\\n"', b"null", b' {"pretty": [true, false]}\n', b"12.5"]
    response = bulk_post(http, url, messages, "application/json")
    assert response.status_code == 204, response.text
    # each row is one message, an array too (no flattening), stored byte for byte
    assert multipart_messages(http, url) == messages
    assert json.loads(read_all(http, url)) == [{"a": 1}, [1, 2, 3], "str\n", None, {"pretty": [True, False]}, 12.5]
    assert arrow_messages(http, url) == (messages, list(range(len(messages))))


def test_ten_mib_messages_and_large_binary(server_factory: object, http: requests.Session) -> None:
    server = server_factory("--max-body-bytes", str(64 * 1024 * 1024))  # type: ignore[operator]
    url = server.stream_url("bulk-big")
    create(http, url, "application/octet-stream")
    big = [bytes([i]) * (10 * 1024 * 1024) for i in range(3)]
    body = arrow_body([big[0], b"small", big[1], big[2]], large=True, chunks=3)
    response = http.post(
        url,
        data=body,
        headers={"Content-Type": ARROW, "Stream-Bulk-Content-Type": "application/octet-stream"},
        timeout=120,
    )
    assert response.status_code == 204, response.text
    assert response.headers["Stream-Next-Offset"] == f"{4:016d}_0000000000000000"
    wait_for(flushed(server), timeout_s=60)
    server.restart()
    assert multipart_messages(http, url) == [big[0], b"small", big[1], big[2]]


def _stored_count(server: ServerProcess) -> int:
    table = DeltaTable(str(server.data_dir / "delta" / "streams")).to_pyarrow_table(columns=["kind"])
    return table["kind"].to_pylist().count("message")


def _head_tail(http: requests.Session, url: str) -> str:
    return str(http.head(url, timeout=10).headers["Stream-Next-Offset"])


def test_refusals_store_nothing(server_factory: Callable[..., ServerProcess], http: requests.Session) -> None:
    server = server_factory("--long-poll-timeout-ms", "500")  # its own: the last check counts every stored message
    json_url, bytes_url = server.stream_url("bulk-ref-json"), server.stream_url("bulk-ref-bytes")
    create(http, json_url, "application/json")
    create(http, bytes_url, "application/octet-stream")
    assert bulk_post(http, json_url, [b"1"], "application/json").status_code == 204
    before = (_head_tail(http, json_url), _head_tail(http, bytes_url))

    def refused(url: str, status: int, code: str, body: bytes | None = None, **headers: str) -> str:
        sent = {"Content-Type": ARROW, **headers}
        response = http.post(url, data=body, headers=sent, timeout=30)
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert error["code"] == code, error
        return str(error["message"])

    # one invalid JSON message among valid ones: 400 naming the row
    message = refused(
        json_url,
        400,
        "INVALID_JSON",
        arrow_body([b"1", b"{}", b"{nope", b"2"]),
        **{"Stream-Bulk-Content-Type": "application/json"},
    )
    assert "row 2" in message
    assert "row 1" in refused(
        json_url, 400, "INVALID_JSON", arrow_body([b"1", b"\xff"]), **{"Stream-Bulk-Content-Type": "application/json"}
    )
    assert "row 0" in refused(
        json_url, 400, "INVALID_JSON", arrow_body([b"1 2"]), **{"Stream-Bulk-Content-Type": "application/json"}
    )
    assert "row 1" in refused(
        json_url, 400, "INVALID_JSON", arrow_body([b"1", b"NaN"]), **{"Stream-Bulk-Content-Type": "application/json"}
    )
    # empty batch; empty message; null message
    ct = {"Stream-Bulk-Content-Type": "application/octet-stream"}
    refused(bytes_url, 400, "EMPTY_BATCH", arrow_body([]), **ct)
    assert "row 1" in refused(bytes_url, 400, "EMPTY_MESSAGE", arrow_body([b"a", b"", b"c"]), **ct)
    nulls = pa.BufferOutputStream()
    with pa.ipc.new_stream(nulls, pa.schema([("data", pa.binary())])) as writer:
        writer.write_batch(pa.record_batch([pa.array([b"a", None], pa.binary())], names=["data"]))
    assert "row 1" in refused(bytes_url, 400, "NULL_MESSAGE", nulls.getvalue().to_pybytes(), **ct)
    # not Arrow; no data column; wrong column type; missing Content-Type
    refused(bytes_url, 400, "INVALID_BULK_BODY", b"not arrow", **ct)
    other = pa.BufferOutputStream()
    with pa.ipc.new_stream(other, pa.schema([("value", pa.binary())])) as writer:
        writer.write_batch(pa.record_batch([pa.array([b"a"])], names=["value"]))
    refused(bytes_url, 400, "INVALID_BULK_BODY", other.getvalue().to_pybytes(), **ct)
    ints = pa.BufferOutputStream()
    with pa.ipc.new_stream(ints, pa.schema([("data", pa.int64())])) as writer:
        writer.write_batch(pa.record_batch([pa.array([1])], names=["data"]))
    refused(bytes_url, 400, "INVALID_BULK_BODY", ints.getvalue().to_pybytes(), **ct)
    response = http.post(bytes_url, data=arrow_body([b"a"]), headers={"Content-Type": "text/plain", **ct}, timeout=10)
    assert response.status_code == 400 and response.json()["error"]["code"] == "INVALID_BULK_BODY"
    # the messages' content type must be the stream's
    refused(bytes_url, 409, "CONTENT_TYPE_MISMATCH", arrow_body([b"a"]), **{"Stream-Bulk-Content-Type": "text/plain"})
    refused(json_url, 409, "CONTENT_TYPE_MISMATCH", arrow_body([b"1"]), **ct)
    refused(json_url, 409, "CONTENT_TYPE_MISMATCH", arrow_body([b"not json"]), **ct)
    assert (_head_tail(http, json_url), _head_tail(http, bytes_url)) == before
    wait_for(flushed(server))
    assert _stored_count(server) == 1


def test_body_limit(server_factory: object, http: requests.Session) -> None:
    server = server_factory("--max-body-bytes", "4096")  # type: ignore[operator]
    url = server.stream_url("bulk-limit")
    create(http, url, "application/octet-stream")
    response = bulk_post(http, url, [b"x" * 1000] * 5, "application/octet-stream")
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"]
    assert _head_tail(http, url) == f"{0:016d}_0000000000000000"
    assert bulk_post(http, url, [b"x" * 1000] * 2, "application/octet-stream").status_code == 204


def test_idempotent_producer_covers_the_batch(shared: ServerProcess, http: requests.Session) -> None:
    url = shared.stream_url("bulk-producer")
    create(http, url, "application/octet-stream")

    def send(seq: int, messages: list[bytes], epoch: int = 0) -> requests.Response:
        return bulk_post(
            http,
            url,
            messages,
            "application/octet-stream",
            **{"Producer-Id": "p1", "Producer-Epoch": str(epoch), "Producer-Seq": str(seq)},
        )

    first = send(0, [b"a", b"b", b"c"])
    assert first.status_code == 200 and first.headers["Producer-Seq"] == "0"
    assert first.headers["Stream-Next-Offset"] == f"{3:016d}_0000000000000000"
    retry = send(0, [b"a", b"b", b"c"])
    assert retry.status_code == 204  # a duplicate as a whole
    assert send(2, [b"x"]).status_code == 409  # a gap
    assert send(1, [b"d", b"e"]).status_code == 200
    assert send(0, [b"z"], epoch=1).status_code == 200  # a new epoch
    assert send(0, [b"z"], epoch=0).status_code == 403  # fenced
    assert multipart_messages(http, url) == [b"a", b"b", b"c", b"d", b"e", b"z"]


def test_stream_seq_and_closed(shared: ServerProcess, http: requests.Session) -> None:
    url = shared.stream_url("bulk-seq")
    create(http, url, "text/plain")
    assert bulk_post(http, url, [b"1", b"2"], "text/plain", **{"Stream-Seq": "b"}).status_code == 204
    regressed = bulk_post(http, url, [b"3"], "text/plain", **{"Stream-Seq": "a"})
    assert regressed.status_code == 409 and regressed.json()["error"]["code"] == "SEQUENCE_REGRESSION"
    final = bulk_post(http, url, [b"3", b"4"], "text/plain", **{"Stream-Seq": "c", "Stream-Closed": "true"})
    assert final.status_code == 204 and final.headers["Stream-Closed"] == "true"
    after = bulk_post(http, url, [b"5"], "text/plain")
    assert after.status_code == 409 and after.json()["error"]["code"] == "STREAM_CLOSED"
    assert multipart_messages(http, url) == [b"1", b"2", b"3", b"4"]
    assert http.head(url, timeout=10).headers["Stream-Closed"] == "true"


def test_head_advertises_the_extension(shared: ServerProcess, http: requests.Session) -> None:
    url = shared.stream_url("bulk-head")
    create(http, url, "application/json")
    assert http.head(url, timeout=10).headers["Stream-Bulk-Append"] == ARROW


def test_plain_append_of_an_arrow_stream_is_not_bulk(shared: ServerProcess, http: requests.Session) -> None:
    """Without the header, an Arrow body is one ordinary message of an Arrow-typed stream."""
    url = shared.stream_url("bulk-plain-arrow")
    create(http, url, ARROW)
    body = arrow_body([b"a", b"b"])
    assert http.post(url, data=body, headers={"Content-Type": ARROW}, timeout=10).status_code == 204
    assert multipart_messages(http, url) == [body]


def test_bulk_and_plain_appends_interleave(shared: ServerProcess, http: requests.Session, tmp_path: Path) -> None:
    """Plain and bulk appends in one flush keep their order in Delta (read back after restart)."""
    url = shared.stream_url("bulk-mixed")
    create(http, url, "application/json")
    expected: list[bytes] = []
    for round_ in range(5):
        plain = http.post(url, data=f"[{round_},{round_}]", headers={"Content-Type": "application/json"}, timeout=10)
        assert plain.status_code == 204
        expected += [str(round_).encode()] * 2
        batch = [f'{{"r":{round_},"i":{i}}}'.encode() for i in range(3)]
        assert bulk_post(http, url, batch, "application/json").status_code == 204
        expected += batch
    wait_for(flushed(shared))
    shared.restart()
    assert multipart_messages(http, url) == expected
