"""``endingTimestamp`` over a scripted transport: the end a time gives is capped at the tails
the read planned from."""

from __future__ import annotations

import json

from client.fake_transport import FakeTransport, Reply
from driver_fakes import URL, driver_on, head

from pyspark_durable_streams.client.time_lookup import OFFSET_FOR_TIME

AT_3 = "0000000000000003_0000000000000000"
AT_9 = "0000000000000009_0000000000000000"


def lookup(offset: str | None, next_offset: str) -> Reply:
    body = {"timestamp": 5, "offset": offset, "next_offset": next_offset, "incarnation": "i-1"}
    return Reply(200, {"Content-Type": OFFSET_FOR_TIME}, json.dumps(body).encode())


def test_an_end_in_time_after_the_tails_is_the_tail_the_read_planned_from() -> None:
    # The tails say 3; by the time of the lookup more was appended, and the time is after them all.
    transport = FakeTransport.script(head(AT_3), lookup(None, AT_9))
    driver = driver_on(transport, endingTimestamp="5")
    assert driver.ending_offsets(driver.tails()) == {URL: AT_3}
    assert [r.method for r in transport.requests] == ["HEAD", "GET"]


def test_an_end_in_time_before_the_tails_is_where_that_time_falls() -> None:
    transport = FakeTransport.script(head(AT_9), lookup(AT_3, AT_9))
    driver = driver_on(transport, endingTimestamp="5")
    assert driver.ending_offsets(driver.tails()) == {URL: AT_3}
