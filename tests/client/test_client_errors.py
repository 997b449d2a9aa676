"""The exception hierarchy against real answers: each error names the URL, status and message."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pyspark_durable_streams.client import (
    Backoff,
    BadRequest,
    Client,
    Conflict,
    ConnectError,
    Gone,
    HTTPStatusError,
    NotFound,
    ProducerFenced,
    SequenceGap,
    Stream,
    TimeoutError,
)
from pyspark_durable_streams.client.errors import error_for_status


def test_not_found_carries_url_status_and_server_message(new_stream: Callable[..., Stream]) -> None:
    stream = new_stream("missing")
    with pytest.raises(NotFound) as caught:
        list(stream.read())
    error = caught.value
    assert error.status == 404 and error.url.startswith(stream.url) and error.method == "GET"
    assert error.message and "not found" in error.message.lower()
    assert str(error).startswith("404") and stream.url in str(error) and error.message in str(error)


def test_malformed_offset_is_a_bad_request(new_stream: Callable[..., Stream]) -> None:
    stream = new_stream("bad-offset")
    stream.create("text/plain")
    with pytest.raises(BadRequest):
        list(stream.read("0,1"))


def test_producer_headers_map_to_fencing_and_gap_errors(new_stream: Callable[..., Stream]) -> None:
    stream = new_stream("producer-errors")
    stream.create("text/plain")

    def produce(epoch: int, seq: int) -> None:
        stream.append("x", headers={"Producer-Id": "p", "Producer-Epoch": str(epoch), "Producer-Seq": str(seq)})

    produce(1, 0)
    with pytest.raises(SequenceGap) as gap:
        produce(1, 2)
    assert (gap.value.expected_seq, gap.value.received_seq) == (1, 2)
    with pytest.raises(ProducerFenced) as fenced:
        produce(0, 0)
    assert fenced.value.current_epoch == 1


def test_reading_a_soft_deleted_fork_source_is_gone(new_stream: Callable[..., Stream]) -> None:
    source = new_stream("gone-source")
    source.create("text/plain", data="kept for the fork")
    fork = new_stream("gone-fork")
    fork.create(forked_from=source)
    source.delete()  # the fork still needs the data: the source is soft-deleted
    with pytest.raises(Gone) as caught:
        list(source.read())
    assert caught.value.status == 410
    with pytest.raises(Conflict):  # a soft-deleted path cannot be created again
        source.create("text/plain")
    assert "".join(m.text() for m in fork.read()) == "kept for the fork"


def test_transport_failures_and_timeouts(base_url: str) -> None:
    with Client("http://127.0.0.1:9", backoff=Backoff(deadline_s=0)) as nowhere:
        with pytest.raises(ConnectError) as refused:
            nowhere.stream("v1/stream/x").metadata()
        assert "127.0.0.1:9" in str(refused.value)
    with Client(base_url, backoff=Backoff(deadline_s=0)) as client:
        stream = client.stream("v1/stream/slow-reader-timeout")
        stream.create("text/plain")
        with pytest.raises(TimeoutError):  # the long-poll waits 500 ms; the read timeout is 0.1 s
            list(stream.read("now", live="long-poll", timeout=(5, 0.1)))


@pytest.mark.parametrize(
    ("status", "headers", "body", "expected", "message"),
    [
        (409, {"Stream-Closed": "true"}, b"", "StreamClosed", ""),
        (409, {"Producer-Expected-Seq": "3"}, b"", "SequenceGap", ""),
        (403, {"Producer-Epoch": "4"}, b"", "ProducerFenced", ""),
        (429, {"Retry-After": "2"}, b"slow down", "RateLimited", "slow down"),
        (503, {}, b'{"error": {"code": "UNAVAILABLE", "message": "storage busy"}}', "ServerError", "storage busy"),
        (418, {}, b"teapot", "HTTPStatusError", "teapot"),
    ],
)
def test_error_for_status_picks_the_most_specific_class(
    status: int, headers: dict[str, str], body: bytes, expected: str, message: str
) -> None:
    error = error_for_status(method="POST", url="http://h/s", status=status, headers=headers, body=body)
    assert type(error).__name__ == expected and isinstance(error, HTTPStatusError)
    assert error.message == message and "http://h/s" in str(error) and str(status) in str(error)
