"""Trigger shaping through a real ``local[2]`` session and a real server: per-batch sizes under
``maxBytesPerTrigger``, and under ``minMessagesPerTrigger`` + ``maxTriggerDelay`` (a batch
waits for enough messages, never longer than the delay; ``Trigger.AvailableNow`` ignores
the minimum; ``maxMessagesPerTrigger`` still caps a batch)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from servers import ServerProcess, wait_for
from source_support import parquet_rows, read_stream, run_to_parquet, server_messages, spark_conf

from pyspark_durable_streams.client import Client, Stream


def _sizes(query: StreamingQuery) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


@pytest.fixture
def stream(server: ServerProcess) -> Iterator[Stream]:
    with Client(server.url) as client:
        created = client.stream(server.stream_url("shaped"))
        created.create("application/json")
        yield created


def _append(stream: Stream, first: int, count: int) -> None:
    stream.append_json_batch([{"n": n, "pad": "x" * (90 - len(str(n)))} for n in range(first, first + count)])


def test_max_bytes_per_trigger_sizes_each_batch(spark: SparkSession, stream: Stream, tmp_path: Path) -> None:
    _append(stream, 0, 100)
    (size,) = {len(body) for _, body in server_messages(stream.url)}  # every message has the same size
    df = read_stream(spark, url=stream.url, maxBytesPerTrigger=str(10 * size + size // 2))
    query = run_to_parquet(df, tmp_path / "out", tmp_path / "checkpoint")
    assert _sizes(query) == [10] * 10  # ten whole messages fit, the eleventh would not
    assert sorted(json.loads(r["value"])["n"] for r in parquet_rows(spark, tmp_path / "out")) == list(range(100))


def test_available_now_ignores_the_minimum_and_keeps_the_maximum(
    spark: SparkSession, stream: Stream, tmp_path: Path
) -> None:
    _append(stream, 0, 150)
    options = {"minMessagesPerTrigger": "50", "maxMessagesPerTrigger": "60", "maxTriggerDelay": "1h"}
    query = run_to_parquet(read_stream(spark, url=stream.url, **options), tmp_path / "out", tmp_path / "checkpoint")
    assert _sizes(query) == [60, 60, 30]  # the last 30 are read although fewer than the minimum


@pytest.fixture
def frequent_progress(spark: SparkSession) -> Iterator[None]:
    """Idle queries report progress every 100 ms (default 10 s), so a test sees each poll."""
    with spark_conf(spark, "spark.sql.streaming.noDataProgressEventInterval", "100"):
        yield


def _start(spark: SparkSession, stream: Stream, tmp_path: Path, **options: str) -> StreamingQuery:
    df = read_stream(spark, url=stream.url, **options)
    writer = df.writeStream.format("parquet").option("path", str(tmp_path / "out"))
    return writer.option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="0 seconds").start()


def _total(query: StreamingQuery) -> int:
    return sum(_sizes(query))


def test_a_batch_waits_for_the_minimum(
    spark: SparkSession, stream: Stream, tmp_path: Path, frequent_progress: None
) -> None:
    _append(stream, 0, 30)
    query = _start(spark, stream, tmp_path, minMessagesPerTrigger="50", maxTriggerDelay="1h")
    try:
        wait_for(lambda: _total(query) == 30, timeout_s=120)  # the first batch runs at once, below the minimum
        _append(stream, 30, 10)
        seen = f"{40:016d}_"
        # The source has looked at the stream since the ten arrived (its latest offset says so) …
        wait_for(lambda: any(seen in json.dumps(p["sources"][0]["latestOffset"]) for p in query.recentProgress), 120)
        assert _sizes(query) == [30]  # … and held them back: fewer than 50, within the hour
        _append(stream, 40, 40)
        wait_for(lambda: _total(query) == 80, timeout_s=120)
        assert _sizes(query) == [30, 50]
    finally:
        query.stop()
    assert query.exception() is None


def test_max_trigger_delay_releases_a_small_batch(spark: SparkSession, stream: Stream, tmp_path: Path) -> None:
    _append(stream, 0, 100)
    query = _start(spark, stream, tmp_path, minMessagesPerTrigger="1000", maxTriggerDelay="1s")
    try:
        wait_for(lambda: _total(query) == 100, timeout_s=120)
        _append(stream, 100, 10)
        wait_for(lambda: _total(query) == 110, timeout_s=120)  # 10 < 1000, run once the second has passed
        assert _sizes(query) == [100, 10]
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(json.loads(r["value"])["n"] for r in parquet_rows(spark, tmp_path / "out")) == list(range(110))
