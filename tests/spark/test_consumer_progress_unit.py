"""Option ``consumer``: a position counts as recorded only once the server has it."""

from __future__ import annotations

import json

from client.fake_transport import FakeTransport, Reply
from driver_fakes import SCHEMA, URL, driver_on, head

from pyspark_durable_streams._source.consumer_progress import record_progress
from pyspark_durable_streams._source.incarnations import encode
from pyspark_durable_streams.options import parse_read_options
from pyspark_durable_streams.source import DurableStreamsStreamReader

AT_3 = "0000000000000003_0000000000000000"
PUT_OK = Reply(200, {"Content-Type": "application/json"}, b'{"consumer": "c", "offsets": {}}')
FAILED = Reply(500, {"Content-Type": "application/json"}, b'{"error": {"code": "INTERNAL", "message": "boom"}}')


def test_nothing_is_recorded_before_the_tails_are_known_and_a_failed_put_is_not_recorded() -> None:
    transport = FakeTransport.script(head(AT_3), FAILED, PUT_OK)
    driver = driver_on(transport)
    end = encode({URL: AT_3}, {})
    assert record_progress(driver, "c", end) is False  # the tails were never looked up: nothing sent
    assert transport.requests == []
    driver.tails()
    assert record_progress(driver, "c", end) is False  # the PUT failed (logged)
    assert record_progress(driver, "c", end) is True
    put = transport.requests[-1]
    assert (put.method, put.url) == ("PUT", "http://fake.invalid:4437/v1/stream/__ds/consumers/c")
    assert json.loads(put.content or b"") == {"offsets": {"orders": AT_3}}


def test_the_reader_sends_a_position_again_until_the_server_has_it() -> None:
    transport = FakeTransport.script(head(AT_3), FAILED, PUT_OK)
    reader = DurableStreamsStreamReader(parse_read_options({"url": URL, "consumer": "c"}), SCHEMA)
    reader._driver = driver_on(transport)
    end = encode({URL: AT_3}, {})
    reader.commit(end)  # before any tails: not sent, not counted
    reader.latestOffset(end, None)  # looks the tails up, then records the committed start: the PUT fails
    reader.commit(end)  # so it is sent again, and lands
    reader.commit(end)  # recorded: not sent again
    assert [r.method for r in transport.requests] == ["HEAD", "PUT", "PUT"]
