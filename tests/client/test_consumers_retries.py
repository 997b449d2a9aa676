"""A tombstone lookup over a scripted transport: "later" answers are asked again with the
client's backoff; an unreachable server is an error, never "no tombstone"."""

from __future__ import annotations

import json

import pytest
from fake_transport import FakeClock, FakeTransport, Reply, reset

from pyspark_durable_streams.client import Backoff, Client
from pyspark_durable_streams.client.errors import ServerError, TransportError

BASE = "http://fake.invalid:4437"
TOMBSTONE = {
    "stream": "v1/stream/orders",
    "incarnation": "i-1",
    "final_offset": "0000000000000002_0000000000000000",
    "messages": 2,
    "deleted_at_ms": 5,
}


def client_on(transport: FakeTransport, clock: FakeClock, deadline_s: float = 30) -> Client:
    backoff = Backoff(initial_s=0.1, max_s=1.0, deadline_s=deadline_s, clock=clock.clock, sleep=clock.sleep)
    return Client(BASE, transport=transport, backoff=backoff)


def test_answers_saying_later_are_asked_again_with_the_clients_backoff() -> None:
    transport = FakeTransport.script(
        Reply(503, {"Retry-After": "2"}), Reply(429), Reply(200, {}, json.dumps(TOMBSTONE).encode())
    )
    clock = FakeClock()
    tombstone = client_on(transport, clock).consumers().tombstone("orders")
    assert tombstone is not None and tombstone.incarnation == "i-1"
    assert [r.url for r in transport.requests] == [f"{BASE}/v1/stream/__ds/tombstones/orders"] * 3
    assert len(clock.sleeps) == 2 and clock.sleeps[0] >= 2  # Retry-After honoured


def test_a_server_saying_later_past_the_deadline_is_an_error() -> None:
    transport = FakeTransport(lambda request: Reply(503))
    with pytest.raises(ServerError):
        client_on(transport, FakeClock(), deadline_s=1).consumers().tombstone("orders")
    assert len(transport.requests) > 1


def test_an_unreachable_server_is_an_error_at_once_and_501_is_no_tombstone() -> None:
    transport = FakeTransport.script(reset(), Reply(501))
    consumers = client_on(transport, FakeClock()).consumers()
    with pytest.raises(TransportError):
        consumers.tombstone("orders")
    assert consumers.tombstone("orders") is None
    assert len(transport.requests) == 2
