"""Filter pushdown for batch reads (option ``filterPushdown``, with PySpark's
``spark.sql.python.filterPushdown.enabled``) through a real ``local[2]`` session and a real
server: filters on ``stream``, ``offset`` and ``timestamp`` narrow the plan (fewer
partitions), and the rows are exactly those of the same filters without pushdown."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from append_times import after, append_times
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from servers import ServerProcess
from source_support import spark_conf

from pyspark_durable_streams.client import Client

PER_GROUP = 20


def _offset(seq: int) -> str:
    return f"{seq:016d}_{0:016d}"


@pytest.fixture
def pushdown(spark: SparkSession) -> Iterator[None]:
    with spark_conf(spark, "spark.sql.python.filterPushdown.enabled", "true"):
        yield


@pytest.fixture
def streams(server: ServerProcess) -> tuple[str, str, list[int]]:
    """Stream b (10 messages), then stream a: three groups of 20 appended at distinct times."""
    a, b = server.stream_url("push-a"), server.stream_url("push-b")
    with Client(server.url) as client:
        client.stream(b).create("application/json")
        client.stream(b).append_json_batch([{"n": n} for n in range(10)])
        stream = client.stream(a)
        stream.create("application/json")
        for group in range(3):
            after(max(append_times(client.stream(b)) + append_times(stream)))
            stream.append_json_batch([{"n": group * PER_GROUP + i} for i in range(PER_GROUP)])
        stamps = append_times(stream)
    return a, b, stamps


def _df(spark: SparkSession, urls: str, pushed: bool) -> DataFrame:
    reader = spark.read.format("durable_streams").option("urls", urls).option("messagesPerPartition", "10")
    return reader.option("historyReads", "http").option("filterPushdown", str(pushed).lower()).load()


def _rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted((r["stream"], r["offset"], r["value"]) for r in df.collect())


def test_filters_narrow_the_plan_and_rows_stay_exact(
    spark: SparkSession, streams: tuple[str, str, list[int]], pushdown: None
) -> None:
    a, b, stamps = streams
    urls = f"{a},{b}"
    third = stamps[2 * PER_GROUP]
    at = F.timestamp_millis(F.lit(third))
    cases = {
        "stream": (F.col("stream") == b, 1),
        "stream in": (F.col("stream").isin(a), 6),
        "offset range": (
            (F.col("stream") == a) & (F.col("offset") >= _offset(25)) & (F.col("offset") < _offset(41)),
            2,
        ),
        "offset equal": (F.col("offset") == _offset(5), 2),  # message 5 of each stream
        "offset at most": ((F.col("stream") == a) & (F.col("offset") <= _offset(9)), 1),
        "since a time": (F.col("timestamp") >= at, 2),  # a's third group only
        "before a time": ((F.col("stream") == a) & (F.col("timestamp") < at), 4),
        "up to a time": ((F.col("stream") == a) & (F.col("timestamp") <= F.timestamp_millis(F.lit(stamps[-1]))), 6),
    }
    unfiltered = _df(spark, urls, True).rdd.getNumPartitions()
    assert unfiltered == 7  # 60 + 10 messages, 10 a partition
    for name, (condition, partitions) in cases.items():
        pushed, plain = _df(spark, urls, True).filter(condition), _df(spark, urls, False).filter(condition)
        assert _rows(pushed) == _rows(plain), name
        assert _rows(pushed), name
        assert pushed.rdd.getNumPartitions() == partitions, name


def test_without_the_session_setting_pyspark_refuses_the_option(spark: SparkSession, streams: Any) -> None:
    a, _, _ = streams
    with pytest.raises(Exception, match="filterPushdown"):
        _df(spark, a, True).collect()
