"""The client's retry paths against our real server behind a loopback fault proxy, and the
idempotent producer's close (with or without a final message, idempotent, conflicting, retried)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from client_support import unique
from fault_proxy import CUT_BODY, DROP_ANSWER, DROP_REQUEST, Fault, FaultProxy
from servers import ServerProcess

from pyspark_durable_streams.client import Backoff, Client, ConnectError, Producer, ServerError, Stream, StreamClosed


@pytest.fixture
def proxy(ours: ServerProcess) -> Iterator[FaultProxy]:
    with FaultProxy(ours.port) as proxy:
        yield proxy


@pytest.fixture
def faulty(proxy: FaultProxy) -> Iterator[Client]:
    """A client whose every request goes through the fault proxy."""
    with Client(proxy.url, backoff=Backoff(initial_s=0.01, deadline_s=10)) as client:
        yield client


def _text_stream(client: Client) -> Stream:
    stream = client.stream(f"v1/stream/{unique('faults')}")
    stream.create("text/plain")
    return stream


def _contents(stream: Stream) -> bytes:
    with stream.read() as reader:
        return b"".join(message.data for message in reader)


# -- producer arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(("argument", "value"), [("epoch", -1), ("max_batch_bytes", 0), ("max_batch_bytes", -1)])
def test_producer_rejects_invalid_arguments(our_client: Client, argument: str, value: int) -> None:
    stream = our_client.stream("v1/stream/never-touched", content_type="text/plain")
    with pytest.raises(ValueError, match=f"^{argument} must be at least"):
        Producer(stream, "p", **{argument: value})  # type: ignore[arg-type]


# -- producer close ----------------------------------------------------------------------------


def test_producer_closes_the_stream_with_a_final_message(our_client: Client) -> None:
    stream = _text_stream(our_client)
    producer = Producer(stream, "closer")
    producer.send(b"a")
    producer.send(b"b")
    result = producer.close_stream(b"end")
    assert result.closed and not result.duplicate
    assert producer.close_stream() == result  # closing again through the same producer: the same answer
    meta = stream.metadata()
    assert meta.closed and meta.next_offset == result.next_offset
    assert _contents(stream) == b"abend"
    with pytest.raises(StreamClosed):
        stream.append(b"late")


def test_another_producer_closing_a_closed_stream_gets_stream_closed(our_client: Client) -> None:
    """The client suite's ``idempotent-producer-close-conflict``: the first producer's close stands,
    a second producer's close (with or without a final message) is a 409 STREAM_CLOSED."""
    stream = _text_stream(our_client)
    first = Producer(stream, "first")
    first.send(b"x").result(10)
    closed = first.close_stream()
    assert closed.closed and not closed.duplicate
    assert first.close_stream() == closed  # the same producer again: its own answer
    with pytest.raises(StreamClosed) as caught:
        Producer(stream, "second").close_stream()
    assert caught.value.status == 409 and caught.value.code == "STREAM_CLOSED"
    assert caught.value.final_offset == closed.next_offset
    with pytest.raises(StreamClosed):
        Producer(stream, "third").close_stream(b"too late")
    assert stream.metadata().closed
    assert _contents(stream) == b"x"


def test_a_retried_close_only_request_is_deduplicated(faulty: Client, proxy: FaultProxy) -> None:
    """A close without a final message whose answer was lost: the retry is the same producer's
    request, a duplicate, never mistaken for another writer's close."""
    stream = _text_stream(faulty)
    producer = Producer(stream, "retried-close-only")
    producer.send(b"a").result(10)
    proxy.inject("POST", DROP_ANSWER)
    result = producer.close_stream()
    assert proxy.faults_seen() == ["drop-answer"]
    assert result.closed and producer.stats().retries == 1
    assert stream.metadata().closed
    assert _contents(stream) == b"a"


def test_a_retried_producer_close_is_deduplicated(faulty: Client, proxy: FaultProxy) -> None:
    stream = _text_stream(faulty)
    producer = Producer(stream, "retried-close")
    producer.send(b"a").result(10)
    proxy.inject("POST", DROP_ANSWER)  # the server closes the stream, the answer is lost
    result = producer.close_stream(b"z")
    assert proxy.faults_seen() == ["drop-answer"]
    assert result.closed and result.duplicate
    assert producer.stats().retries == 1
    assert _contents(stream) == b"az"


def test_producer_batches_survive_injected_faults(faulty: Client, proxy: FaultProxy) -> None:
    stream = _text_stream(faulty)
    proxy.inject("POST", Fault.status(500), Fault.status(503, retry_after=1), DROP_REQUEST, DROP_ANSWER)
    with Producer(stream, "faulted", max_in_flight=1, linger=0) as producer:
        for i in range(6):
            producer.send(f"{i};".encode()).result(30)
    assert proxy.pending() == 0
    assert _contents(stream) == b"0;1;2;3;4;5;"


# -- plain appends -----------------------------------------------------------------------------


def test_plain_append_retries_a_503_with_retry_after(faulty: Client, proxy: FaultProxy) -> None:
    stream = _text_stream(faulty)
    proxy.inject("POST", Fault.status(503, retry_after=1))
    result = stream.append(b"once")
    assert proxy.faults_seen() == ["status"]
    assert result.next_offset is not None
    assert _contents(stream) == b"once"


def test_plain_append_does_not_retry_what_may_have_been_stored(faulty: Client, proxy: FaultProxy) -> None:
    stream = _text_stream(faulty)
    proxy.inject("POST", Fault.status(500), DROP_ANSWER)
    with pytest.raises(ServerError):
        stream.append(b"maybe")
    with pytest.raises(ConnectError):
        stream.append(b"stored, answer lost")
    assert [method for method, _, _ in proxy.log].count("POST") == 2
    proxy.inject("POST", Fault.status(500), DROP_REQUEST)
    stream.append(b"opted-in", retry=True)  # the caller accepts at-least-once
    assert _contents(stream) == b"stored, answer lostopted-in"


def test_append_with_stream_seq_retries_every_transient_failure(faulty: Client, proxy: FaultProxy) -> None:
    stream = _text_stream(faulty)
    proxy.inject("POST", Fault.status(500), DROP_REQUEST, Fault.status(503))
    stream.append(b"one", seq="0001")
    assert proxy.faults_seen() == ["status", "drop-request", "status"]
    assert _contents(stream) == b"one"


# -- reads -------------------------------------------------------------------------------------


def test_reads_resume_after_injected_faults(faulty: Client, proxy: FaultProxy) -> None:
    stream = faulty.stream(f"v1/stream/{unique('faults-read')}")
    stream.create("application/json")
    stream.append_json_batch([{"i": i} for i in range(50)])
    proxy.inject("GET", Fault.status(503, retry_after=1), CUT_BODY, Fault.status(500), DROP_REQUEST)
    with stream.read() as reader:
        values = [message.json() for message in reader]
    assert proxy.faults_seen() == ["status", "cut-body", "status", "drop-request"]
    assert values == [{"i": i} for i in range(50)]
