"""The source's driver over a scripted transport (``tests/client/fake_transport.py``): unit
tests of what the driver sends and decides, without a server or a SparkSession."""

from __future__ import annotations

from client.fake_transport import FakeClock, FakeTransport, Reply
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from pyspark_durable_streams._source.driver_streams import DriverStreams
from pyspark_durable_streams.client import Backoff, Client
from pyspark_durable_streams.options import parse_read_options

BASE = "http://fake.invalid:4437"
URL = f"{BASE}/v1/stream/orders"
SCHEMA = StructType([StructField("stream", StringType(), False), StructField("value", BinaryType(), True)])


def driver_on(transport: FakeTransport, clock: FakeClock | None = None, **options: str) -> DriverStreams:
    """A ``DriverStreams`` reading ``URL`` whose client talks to ``transport`` (and backs off
    on ``clock``, never sleeping)."""
    clock = clock or FakeClock()
    driver = DriverStreams(parse_read_options({"url": URL, **options}))
    driver.client.close()
    backoff = Backoff(initial_s=0.1, max_s=1.0, deadline_s=30, clock=clock.clock, sleep=clock.sleep)
    driver.client = Client(BASE, transport=transport, backoff=backoff)
    return driver


def head(next_offset: str, incarnation: str | None = None) -> Reply:
    headers = {"Stream-Next-Offset": next_offset, "Content-Type": "application/json"}
    if incarnation is not None:
        headers["Stream-Incarnation"] = incarnation
    return Reply(200, headers)
