"""``Stream.append_many`` and the producer's batches: bulk appends on our server (one request,
every message its own, bytes and boundaries kept), plain appends on the reference Node
server, which does not know the extension (JSON arrays; one request per message)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import requests

from pyspark_durable_streams.client import Producer, Stream, bulk

TRICKY = [b"a", b"\r\n", b"\x00", b"--", b"--x\r\n\r\n", b"\xff\xfe", "é".encode(), b"z" * 3000]


@pytest.mark.parametrize("content_type", ["application/octet-stream", "text/plain"])
def test_append_many_byte_stream(new_stream: Callable[..., Stream], server_name: str, content_type: str) -> None:
    stream = new_stream("many-bytes")
    stream.create(content_type)
    assert stream.supports_bulk() is (server_name == "ours")
    result = stream.append_many(TRICKY)
    stream.append_many([b"last", b"one"], close=True)
    assert result.next_offset is not None
    data = [m.data for m in stream.read()]
    if server_name == "ours":
        assert data == [*TRICKY, b"last", b"one"]
    else:  # (plain reads of a byte stream carry no boundaries)
        assert b"".join(data) == b"".join(TRICKY) + b"lastone"
    assert stream.metadata().closed


def test_append_many_json_stream(new_stream: Callable[..., Stream], server_name: str) -> None:
    stream = new_stream("many-json")
    stream.create("application/json")
    values = [{"a": 1}, [1, 2], "s", None, 1.5]
    stream.append_many([json.dumps(value) for value in values])
    assert [m.json() for m in stream.read()] == values
    with pytest.raises(Exception):  # noqa: B017 - 400 on both servers, nothing stored
        stream.append_many([b"1", b"{nope"])
    assert [m.json() for m in stream.read()] == values


def test_append_many_refuses_empty_messages(new_stream: Callable[..., Stream]) -> None:
    stream = new_stream("many-empty")
    stream.create("application/octet-stream")
    with pytest.raises(ValueError, match="no empty"):
        stream.append_many([b"a", b""])
    with pytest.raises(ValueError, match="at least one"):
        stream.append_many([])


def test_append_many_seq_needs_bulk_on_byte_streams(new_stream: Callable[..., Stream], server_name: str) -> None:
    stream = new_stream("many-seq")
    stream.create("application/octet-stream")
    if server_name == "ours":
        stream.append_many([b"a", b"b"], seq="001")
        assert [m.data for m in stream.read()] == [b"a", b"b"]
    else:
        with pytest.raises(ValueError, match="Stream-Seq"):
            stream.append_many([b"a", b"b"], seq="001")


def test_producer_byte_batches_keep_boundaries_where_the_server_takes_bulk_appends(
    new_stream: Callable[..., Stream], server_name: str
) -> None:
    stream = new_stream("producer-bulk")
    stream.create("application/octet-stream")
    with Producer(stream, "bulk-producer", linger=0.01, max_batch_bytes=256, bulk=None) as producer:
        for i in range(300):
            producer.send(f"<{i}>".encode())
    data = [m.data for m in stream.read()]  # (multipart reads on our server keep boundaries)
    expected = [f"<{i}>".encode() for i in range(300)]
    if server_name == "ours":
        assert data == expected  # one message per send()
        assert 1 < producer.stats().batches_acked < 300
    else:
        assert b"".join(data) == b"".join(expected)  # concatenated per batch (the plain protocol)


def test_reference_server_refuses_a_bulk_append_and_stores_nothing(reference: str) -> None:
    """What makes the fallback safe: an unknowing server answers 4xx and stores nothing."""
    http = requests.Session()
    http.trust_env = False
    for content_type in ("application/json", "application/octet-stream"):
        url = f"{reference}/v1/stream/refuse-{content_type.replace('/', '-')}"
        assert http.put(url, headers={"Content-Type": content_type}, timeout=10).status_code == 201
        before = http.head(url, timeout=10).headers["Stream-Next-Offset"]
        response = http.post(url, data=bulk.body([b"1", b"2"]), headers=bulk.headers(content_type), timeout=10)
        assert 400 <= response.status_code < 500, response.status_code
        assert http.head(url, timeout=10).headers["Stream-Next-Offset"] == before
        assert http.get(url, params={"offset": "-1"}, timeout=10).content in (b"", b"[]")
