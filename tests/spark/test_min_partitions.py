"""``minPartitions`` spreads a batch's history read from Delta as it does an HTTP read: each
stream gets at least its share, by pending messages, of that many partitions."""

from __future__ import annotations

import json
from collections.abc import Callable

from direct_support import FAST, fill, flushed, offset_at, read_rows
from pyspark.sql import SparkSession
from servers import ServerProcess, session, wait_for

from pyspark_durable_streams._connect import connect
from pyspark_durable_streams._source.direct_plans import DirectRange, plan_stream
from pyspark_durable_streams._source.driver_streams import DriverStreams
from pyspark_durable_streams._source.offsets import EARLIEST
from pyspark_durable_streams.options import parse_read_options

JSON = {"Content-Type": "application/json"}
MESSAGES = [json.dumps({"i": i, "pad": "z" * (50 + i % 40)}, separators=(",", ":")).encode() for i in range(8_000)]


def _direct_partitions(urls: list[str], **options: str) -> dict[str, list[DirectRange]]:
    """The direct partitions the driver plans for a batch of ``urls`` from their start, by stream."""
    driver = DriverStreams(parse_read_options({"urls": ",".join(urls), **options}))
    planned = driver.plan({}, driver.tails())
    by_stream: dict[str, list[DirectRange]] = {url: [] for url in urls}
    for part in planned:
        assert isinstance(part, DirectRange), part  # (all of it is in Delta)
        by_stream[part.key].append(part)
    return by_stream


def _shape(partitions: list[DirectRange]) -> list[tuple[int, int, list[tuple[str | None, tuple[int, ...]]]]]:
    """What a partition reads: its messages and row groups (not the signed URLs, which expire)."""
    return [(part.first, part.end, [(file.local, file.row_groups) for file in part.files]) for part in partitions]


def _planned_every(url: str, end: int, per_partition: int) -> list[DirectRange]:
    with connect(parse_read_options({"url": url}).connection, url) as client:
        partitions, boundary = plan_stream(client, url, url, EARLIEST, offset_at(end), per_partition)
    assert boundary == offset_at(end)
    return partitions


def test_min_partitions_splits_direct_reads_by_each_streams_share(
    spark: SparkSession, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(*FAST)
    big, small = server.stream_url("big"), server.stream_url("small")
    # Each 500 messages flushed alone: row groups of one stream, 500 messages each. (Written at
    # once, a stream may land in one row group, which no partitioning splits.)
    for url, count in ((big, 6_000), (small, 2_000)):
        fill(session(), url, "application/json", [])
        for at in range(0, count, 500):
            body = b"[" + b",".join(MESSAGES[at : at + 500]) + b"]"
            assert session().post(url, headers=JSON, data=body).status_code == 204
            wait_for(lambda url=url, at=at: flushed(url, at + 500), timeout_s=60)

    default = _direct_partitions([big, small])
    assert [len(default[big]), len(default[small])] == [1, 1]  # 100,000 messages a partition

    # 8 partitions shared 6:2 by pending messages: a partition every 1,000 messages of each.
    spread = _direct_partitions([big, small], minPartitions="8")
    assert _shape(spread[big]) == _shape(_planned_every(big, 6_000, 1_000))
    assert _shape(spread[small]) == _shape(_planned_every(small, 2_000, 1_000))
    assert [len(spread[big]), len(spread[small])] == [6, 2]
    assert spread[big][0].first == 0 and spread[big][-1].end == 6_000

    df = spark.read.format("durable_streams").option("url", big).option("minPartitions", "4").load()
    assert df.rdd.getNumPartitions() == len(_direct_partitions([big], minPartitions="4")[big]) > 1
    assert read_rows(spark, url=big, historyReads="delta", minPartitions="4") == read_rows(
        spark, url=big, historyReads="http"
    )
