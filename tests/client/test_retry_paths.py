"""The idempotent-delivery retry paths, driven through a scripted transport and a fake clock.

Both users of ``client.delivery`` are covered: the client's ``Producer`` and the Spark sink's
``TaskSender``. Every test asserts the exact requests sent (a retry repeats the triple and the
body), what the caller made of the answers, and the delays slept (``Retry-After`` honoured
on 429 and 503; backoff otherwise), without a server and without sleeping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import requests
from fake_transport import FakeClock, FakeTransport, Outcome, Reply, reset, seq_of

from pyspark_durable_streams._sink.sender import SinkError, TaskSender
from pyspark_durable_streams.client import Backoff, Client, Producer, ProducerFenced, SequenceGap, Stream
from pyspark_durable_streams.client._http import FOLLOWS_REDIRECTS, Request
from pyspark_durable_streams.client.errors import ServerError, TransportError

BASE = "http://fake.invalid:4437"
URL = f"{BASE}/v1/stream/orders"
JSON = "application/json"


def ok(seq: int, status: int = 200) -> Reply:
    return Reply(status, {"Stream-Next-Offset": f"{seq + 1:016d}_0000000000000000", "Producer-Seq": str(seq)})


def gap(expected: int) -> Reply:
    body = b'{"error": {"code": "SEQUENCE_GAP", "message": "gap"}}'
    return Reply(409, {"Producer-Expected-Seq": str(expected)}, body)


def triple(request: Request) -> tuple[str, str, str, bytes | None]:
    headers = request.headers
    return headers["Producer-Id"], headers["Producer-Epoch"], headers["Producer-Seq"], request.content


def producer_on(transport: FakeTransport, clock: FakeClock, **options: object) -> Producer:
    client = Client(BASE, token="secret", transport=transport)
    stream = client.stream("v1/stream/orders", content_type=JSON)
    backoff = Backoff(initial_s=0.1, max_s=1.0, deadline_s=30, clock=clock.clock, sleep=clock.sleep)
    return Producer(stream, "p1", epoch=2, backoff=backoff, linger=0, **options)  # type: ignore[arg-type]


def sender_on(transport: FakeTransport, clock: FakeClock, *, deadline_s: float = 30) -> TaskSender:
    client = Client(BASE, transport=transport)
    backoff = Backoff(initial_s=0.1, max_s=1.0, deadline_s=deadline_s, clock=clock.clock, sleep=clock.sleep)
    return TaskSender(
        client, producer_id="query-7-part-3", epoch=11, max_in_flight=4, delivery_timeout_s=deadline_s, backoff=backoff
    )


# -- Producer --------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "retry_after"), [(429, "3"), (503, "2.5")])
def test_producer_waits_retry_after_then_repeats_the_triple(status: int, retry_after: str) -> None:
    transport = FakeTransport.script(Reply(status, {"Retry-After": retry_after}), ok(0))
    clock = FakeClock()
    with producer_on(transport, clock) as producer:
        result = producer.send_json({"id": 1}).result(timeout=10)
    first, second = transport.requests
    assert first == second  # the retry is the same request: method, URL, headers, body
    assert (first.method, first.url) == ("POST", URL)
    assert dict(first.headers) == {
        FOLLOWS_REDIRECTS[0]: FOLLOWS_REDIRECTS[1],  # (a cluster node may redirect: this client follows)
        "Authorization": "Bearer secret",
        "Content-Type": JSON,
        "Producer-Id": "p1",
        "Producer-Epoch": "2",
        "Producer-Seq": "0",
    }
    assert first.content == b'[{"id":1}]'
    assert clock.sleeps == [float(retry_after)]  # longer than the backoff's 0.05-0.1 s
    assert result.next_offset == "0000000000000001_0000000000000000" and not result.duplicate
    stats = producer.stats()
    assert (stats.retries, stats.batches_acked, stats.duplicates) == (1, 1, 0)


def test_producer_connection_reset_mid_request_is_resent_and_deduplicated() -> None:
    """The reset request had been stored: the retry is answered 204 and counts as a duplicate."""
    transport = FakeTransport.script(reset(), ok(0, status=204))
    clock = FakeClock()
    with producer_on(transport, clock) as producer:
        result = producer.send_json("x").result(timeout=10)
    assert [triple(r) for r in transport.requests] == [("p1", "2", "0", b'["x"]')] * 2
    assert len(clock.sleeps) == 1 and 0.05 <= clock.sleeps[0] <= 0.1  # initial_s with jitter
    assert isinstance(transport.exchanges[0][1], requests.ConnectionError)
    assert result.duplicate
    assert (producer.stats().retries, producer.stats().duplicates) == (1, 1)


def out_of_order(*, overtaken: int, then: Callable[[Request], Outcome]) -> Callable[[Request], Outcome]:
    """A handler under which seq ``overtaken + 1`` reaches the server before seq ``overtaken``:
    it is answered 409 (expected ``overtaken``), and seq ``overtaken`` is answered only after."""
    overtook = threading.Event()
    early: set[int] = set()

    def handle(request: Request) -> Outcome:
        seq = seq_of(request)
        if seq == overtaken:
            assert overtook.wait(10), "the later seq never arrived"
        elif seq == overtaken + 1 and seq not in early:
            early.add(seq)
            overtook.set()
            return gap(overtaken)
        return then(request)

    return handle


def test_producer_409_out_of_order_waits_for_its_predecessor_then_resends() -> None:
    transport = FakeTransport(out_of_order(overtaken=1, then=lambda request: ok(seq_of(request))))
    clock = FakeClock()
    # One message per batch (max_batch_bytes=1): seqs 0, 1, 2; seq 0 goes alone, then 1 and 2 together.
    with producer_on(transport, clock, max_batch_bytes=1, max_in_flight=4) as producer:
        futures = [producer.send_json(value) for value in ("a", "b", "c")]
    assert [(seq_of(r), getattr(o, "status", o)) for r, o in transport.exchanges] == [
        (0, 200),
        (2, 409),
        (1, 200),
        (2, 200),
    ]
    seq2 = [triple(r) for r in transport.requests if seq_of(r) == 2]
    assert seq2 == [("p1", "2", "2", b'["c"]')] * 2
    assert [f.result().producer_seq for f in futures] == [0, 1, 2]
    assert clock.sleeps == []  # not a backoff: a resend once the predecessor is acknowledged
    assert producer.stats().retries == 0


def test_producer_gap_it_cannot_explain_is_fatal() -> None:
    """Seq 0 was sent with nothing before it: a 409 asking for seq 5 is not a reordering."""
    transport = FakeTransport.script(gap(5))
    producer = producer_on(transport, FakeClock())
    future = producer.send_json("lost?")
    with pytest.raises(SequenceGap) as raised:
        producer.close()
    assert raised.value.expected_seq == 5
    assert future.exception() is raised.value
    assert len(transport.requests) == 1


# -- the sink's TaskSender ---------------------------------------------------------------------


@pytest.mark.parametrize(("status", "retry_after"), [(429, "4"), (503, "1.5")])
def test_sink_waits_retry_after_then_repeats_the_triple(status: int, retry_after: str) -> None:
    transport = FakeTransport.script(ok(0), Reply(status, {"Retry-After": retry_after}), ok(1))
    clock = FakeClock()
    sender = sender_on(transport, clock)
    sender.send(URL, JSON, b'[{"n":0}]')
    sender.send(URL, JSON, b'[{"n":1}]')
    sender.finish()
    assert [triple(r) for r in transport.requests] == [
        ("query-7-part-3", "11", "0", b'[{"n":0}]'),
        ("query-7-part-3", "11", "1", b'[{"n":1}]'),
        ("query-7-part-3", "11", "1", b'[{"n":1}]'),
    ]
    assert transport.requests[1] == transport.requests[2]
    assert dict(transport.requests[0].headers) == {
        FOLLOWS_REDIRECTS[0]: FOLLOWS_REDIRECTS[1],
        "Content-Type": JSON,
        "Producer-Id": "query-7-part-3",
        "Producer-Epoch": "11",
        "Producer-Seq": "0",
    }
    assert clock.sleeps == [float(retry_after)]
    assert (sender.stats.requests, sender.stats.accepted, sender.stats.retries) == (2, 2, 1)


def test_sink_connection_reset_mid_request_is_resent_and_counted_as_duplicate() -> None:
    transport = FakeTransport.script(reset(), ok(0, status=204))
    clock = FakeClock()
    sender = sender_on(transport, clock)
    sender.send(URL, "application/octet-stream", b"bytes")
    sender.finish()
    assert [triple(r) for r in transport.requests] == [("query-7-part-3", "11", "0", b"bytes")] * 2
    assert len(clock.sleeps) == 1 and 0.05 <= clock.sleeps[0] <= 0.1
    assert (sender.stats.accepted, sender.stats.duplicates, sender.stats.retries) == (0, 1, 1)


def test_sink_409_out_of_order_resends_once_the_predecessor_lands() -> None:
    transport = FakeTransport(out_of_order(overtaken=1, then=lambda request: ok(seq_of(request))))
    clock = FakeClock()
    sender = sender_on(transport, clock)
    for n in range(3):
        sender.send(URL, JSON, f'["{n}"]'.encode())
    sender.finish()
    assert [(seq_of(r), getattr(o, "status", o)) for r, o in transport.exchanges] == [
        (0, 200),
        (2, 409),
        (1, 200),
        (2, 200),
    ]
    assert [triple(r) for r in transport.requests if seq_of(r) == 2] == [("query-7-part-3", "11", "2", b'["2"]')] * 2
    assert clock.sleeps == [] and sender.stats.retries == 0
    assert sender.stats.accepted == 3


def test_sink_409_gap_after_its_predecessor_landed_is_backed_off() -> None:
    """Seq 1 is answered 409 although seq 0 was delivered: not a reordering, so it backs off."""
    transport = FakeTransport.script(ok(0), gap(0), ok(1))
    clock = FakeClock()
    sender = sender_on(transport, clock)
    sender.send(URL, JSON, b"[0]")
    sender.send(URL, JSON, b"[1]")
    sender.finish()
    assert [seq_of(r) for r in transport.requests] == [0, 1, 1]
    assert len(clock.sleeps) == 1 and 0.05 <= clock.sleeps[0] <= 0.1
    assert sender.stats.retries == 1


def test_sink_gives_up_at_its_deadline_naming_the_triple_and_the_option() -> None:
    """503 + Retry-After 0.4 against a 1 s deadline: sleeps at 0, 0.4 and 0.8 s, then gives up."""
    transport = FakeTransport(lambda request: Reply(503, {"Retry-After": "0.4"}, b"storage busy"))
    clock = FakeClock()
    sender = sender_on(transport, clock, deadline_s=1)
    with pytest.raises(SinkError) as raised:
        sender.send(URL, JSON, b"[0]")
    assert clock.sleeps == [0.4, 0.4, 0.4]
    assert [seq_of(r) for r in transport.requests] == [0, 0, 0, 0]
    message = str(raised.value)
    assert "Producer-Id query-7-part-3, epoch 11, seq 0" in message and "'deliveryTimeoutMs'" in message
    assert "storage busy" in message


def test_sink_fenced_is_not_retried() -> None:
    transport = FakeTransport.script(Reply(403, {"Producer-Epoch": "12"}, b"stale epoch"))
    sender = sender_on(transport, FakeClock())
    with pytest.raises(SinkError, match="it has seen epoch 12, newer than this task's epoch 11") as raised:
        sender.send(URL, JSON, b"[0]")
    assert isinstance(raised.value.__cause__, ProducerFenced)
    assert len(transport.requests) == 1


# -- lookups (HEAD) --------------------------------------------------------------------------------


def stream_on(transport: FakeTransport, clock: FakeClock) -> Stream:
    backoff = Backoff(initial_s=0.1, max_s=1.0, deadline_s=30, clock=clock.clock, sleep=clock.sleep)
    return Client(BASE, transport=transport, backoff=backoff).stream("v1/stream/orders")


def test_a_lookup_answered_later_is_asked_again_after_retry_after() -> None:
    """A cluster node answers 503 while the stream's shard moves: the HEAD is asked again."""
    moving = Reply(503, {"Retry-After": "1.5"}, b'{"error": {"code": "SHARD_UNAVAILABLE", "message": "moving"}}')
    tail = Reply(200, {"Stream-Next-Offset": "0000000000000007_0000000000000000", "Content-Type": JSON})
    transport = FakeTransport.script(moving, Reply(429, {}), tail)
    clock = FakeClock()
    meta = stream_on(transport, clock).metadata()
    assert [(r.method, r.url) for r in transport.requests] == [("HEAD", URL)] * 3
    assert clock.sleeps[0] == 1.5 and 0.1 <= clock.sleeps[1] <= 0.2  # Retry-After, then the backoff
    assert (meta.next_offset, meta.content_type) == ("0000000000000007_0000000000000000", JSON)


def test_a_lookup_of_a_server_that_does_not_answer_fails_at_once() -> None:
    """No answer at all (a wrong URL, a server down) is reported without waiting out the backoff."""
    transport = FakeTransport.script(requests.ConnectionError(ConnectionRefusedError(111, "refused")))
    clock = FakeClock()
    with pytest.raises(TransportError):
        stream_on(transport, clock).metadata()
    assert len(transport.requests) == 1 and clock.sleeps == []


def test_a_lookup_keeps_answering_later_until_the_deadline_then_fails() -> None:
    transport = FakeTransport(lambda request: Reply(503, {}))
    clock = FakeClock()
    with pytest.raises(ServerError):
        stream_on(transport, clock).metadata()
    assert sum(clock.sleeps) == pytest.approx(30, abs=1.0) and len(transport.requests) > 5


# -- the seam itself -----------------------------------------------------------------------------


def test_transport_excludes_the_requests_settings_and_is_closed_by_its_owner() -> None:
    transport = FakeTransport.script()
    with pytest.raises(ValueError, match="session, auth and verify configure the default transport"):
        Client(BASE, transport=transport, verify=False)
    with Client(BASE, transport=transport):
        pass
    assert not transport.closed


@pytest.mark.parametrize(
    ("status", "headers", "code"), [(503, {"Retry-After": "1"}, "COMMIT_IN_DOUBT"), (502, {}, "RELAY_IN_DOUBT")]
)
def test_a_plain_append_answered_in_doubt_is_not_sent_again(status: int, headers: dict[str, str], code: str) -> None:
    """An answer that says the append may have been stored (a Delta commit that may still land; a
    cluster node that lost the shard server's answer) is no proof it was not: a plain append is
    not resent (it could be stored twice), even with ``Retry-After``."""
    body = b'{"error": {"code": "%s", "message": "may have been stored"}}' % code.encode()
    transport = FakeTransport.script(Reply(status, headers, body), ok(0))
    clock = FakeClock()
    backoff = Backoff(initial_s=0.1, max_s=1.0, deadline_s=30, clock=clock.clock, sleep=clock.sleep)
    stream = Client(BASE, transport=transport, backoff=backoff).stream("v1/stream/orders", content_type=JSON)
    with pytest.raises(ServerError) as raised:
        stream.append(b'{"n": 1}')
    assert raised.value.code == code
    assert len(transport.requests) == 1 and clock.sleeps == []
