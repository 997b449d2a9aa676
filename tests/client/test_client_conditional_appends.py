"""``Stream.append(..., if_match=...)``: the conditional append extension from the client.

Through a scripted transport: the header sent (the offset quoted; an ETag passed as it came), a
412 raised as ``PreconditionFailed`` with the ``current_offset``, and the retries of a plain
append (only failures proving the request was not processed). Against our server: a chain of
conditional appends through ``next_offset``, and a stale one refused with nothing stored.
"""

from __future__ import annotations

import pytest
import requests
import urllib3
from fake_transport import FakeClock, FakeTransport, Reply, reset
from servers import ServerProcess

from pyspark_durable_streams.client import (
    Backoff,
    Client,
    HTTPStatusError,
    PreconditionFailed,
    Stream,
    TransportError,
)
from pyspark_durable_streams.client.errors import error_for_status

BASE = "http://fake.invalid:4437"
TEXT = "text/plain"
TAIL_1 = "0000000000000001_0000000000000000"
TAIL_2 = "0000000000000002_0000000000000000"
REFUSED = Reply(
    412,
    {"ETag": f'"{TAIL_2}"', "Stream-Next-Offset": TAIL_2, "Content-Type": "application/json"},
    b'{"error": {"code": "PRECONDITION_FAILED", "message": "the stream\'s tail is %s"}}' % TAIL_2.encode(),
)


def stream_on(transport: FakeTransport, clock: FakeClock) -> Stream:
    backoff = Backoff(initial_s=0.1, max_s=1.0, deadline_s=30, clock=clock.clock, sleep=clock.sleep)
    return Client(BASE, transport=transport, backoff=backoff).stream("v1/stream/doc", content_type=TEXT)


def stored(tail: str) -> Reply:
    return Reply(204, {"Stream-Next-Offset": tail, "ETag": f'"{tail}"'})


def test_the_offset_is_sent_quoted_and_the_result_is_the_new_tail() -> None:
    transport = FakeTransport.script(stored(TAIL_2), stored("0000000000000003_0000000000000000"))
    stream = stream_on(transport, FakeClock())
    result = stream.append("b", if_match=TAIL_1)
    assert result.next_offset == TAIL_2
    stream.append("c", if_match=f'"{result.next_offset}"')  # (an ETag as it came is sent as it is)
    assert [request.headers["If-Match"] for request in transport.requests] == [f'"{TAIL_1}"', f'"{TAIL_2}"']


def test_a_412_is_precondition_failed_with_the_current_offset() -> None:
    transport = FakeTransport.script(REFUSED)
    clock = FakeClock()
    with pytest.raises(PreconditionFailed) as raised:
        stream_on(transport, clock).append("b", if_match=TAIL_1)
    error = raised.value
    assert isinstance(error, HTTPStatusError)
    assert (error.status, error.code, error.current_offset) == (412, "PRECONDITION_FAILED", TAIL_2)
    assert TAIL_2 in str(error)
    assert len(transport.requests) == 1 and clock.sleeps == []  # (never retried: the answer is final)


def test_current_offset_falls_back_to_the_etag() -> None:
    error = error_for_status(method="POST", url=BASE, status=412, headers={"ETag": f'"{TAIL_2}"'}, body=b"")
    assert isinstance(error, PreconditionFailed) and error.current_offset == TAIL_2
    bare = error_for_status(method="POST", url=BASE, status=412, headers={}, body=b"")
    assert isinstance(bare, PreconditionFailed) and bare.current_offset is None


def test_a_conditional_append_is_retried_only_when_it_was_not_processed() -> None:
    # 429 proves it was not processed: resent, with the same If-Match
    transport = FakeTransport.script(Reply(429, {"Retry-After": "1"}), stored(TAIL_2))
    clock = FakeClock()
    stream_on(transport, clock).append("b", if_match=TAIL_1)
    assert [request.headers["If-Match"] for request in transport.requests] == [f'"{TAIL_1}"'] * 2
    assert clock.sleeps == [1.0]
    # a reset after sending does not (even with a Stream-Seq): the append may have been stored
    transport = FakeTransport.script(reset())
    with pytest.raises(TransportError):
        stream_on(transport, FakeClock()).append("b", if_match=TAIL_1, seq="0001")
    assert len(transport.requests) == 1
    # a refused connection does: nothing was sent
    refused = requests.ConnectionError(urllib3.exceptions.NewConnectionError(None, "refused"))
    transport = FakeTransport.script(refused, stored(TAIL_2))
    stream_on(transport, FakeClock()).append("b", if_match=TAIL_1)
    assert len(transport.requests) == 2


def test_append_many_without_bulk_refuses_if_match_on_byte_streams() -> None:
    transport = FakeTransport.script(Reply(200, {"Stream-Next-Offset": TAIL_1, "Content-Type": TEXT}))
    with pytest.raises(ValueError, match="if_match"):
        stream_on(transport, FakeClock()).append_many([b"a", b"b"], if_match=TAIL_1)


def test_conditional_appends_against_our_server(ours: ServerProcess) -> None:
    with Client(ours.url, backoff=Backoff(deadline_s=10)) as client:
        stream = client.stream("v1/stream/client-conditional")
        created = stream.create(TEXT)
        first = stream.append("a", if_match=created.next_offset)
        second = stream.append("b", if_match=first.next_offset)
        with pytest.raises(PreconditionFailed) as raised:
            stream.append("x", if_match=first.next_offset)
        assert raised.value.current_offset == second.next_offset
        batch = stream.append_many(["c", "d"], if_match=raised.value.current_offset)  # (one bulk request)
        assert batch.next_offset == "0000000000000004_0000000000000000"
        assert b"".join(message.data for message in stream.read()) == b"abcd"
