"""``_source.deletions.judge`` over a scripted transport: what a tombstone lookup's answer,
or its failure, makes of a deleted stream."""

from __future__ import annotations

import json

import pytest
from client.fake_transport import FakeTransport, Reply, reset
from driver_fakes import URL, driver_on

from pyspark_durable_streams._source.deletions import judge
from pyspark_durable_streams.client.errors import TransportError

AT_2 = "0000000000000002_0000000000000000"


def tombstone(incarnation: str) -> Reply:
    body = {"stream": "v1/stream/orders", "incarnation": incarnation, "final_offset": AT_2, "messages": 2}
    return Reply(200, {}, json.dumps({**body, "deleted_at_ms": 1}).encode())


def test_a_failed_lookup_fails_the_query_instead_of_judging_loss() -> None:
    with pytest.raises(TransportError):
        judge(driver_on(FakeTransport.script(reset())), URL, AT_2, "i-1")


def test_a_later_answer_is_asked_again_then_judged() -> None:
    transport = FakeTransport.script(Reply(503), tombstone("i-1"))
    assert judge(driver_on(transport), URL, AT_2, "i-1").read_all
    assert len(transport.requests) == 2


def test_a_tombstone_is_trusted_only_for_the_incarnation_read() -> None:
    assert not judge(driver_on(FakeTransport.script(tombstone("i-2"))), URL, AT_2, "i-1").read_all
    unknown = judge(driver_on(FakeTransport.script(tombstone("i-1"))), URL, AT_2, None)
    assert not unknown.read_all  # an old checkpoint: which incarnation it read is unknown
    assert unknown.cause is not None and "incarnation" in unknown.cause
