"""Starting and ending by time (``startingTimestamp``, ``endingTimestamp``,
``startingOffsetsByTimestamp`` and its strategy) through a real ``local[2]`` session and
real servers: exact rows in batch and streaming reads, the strategy for a time after every
message, and a clear error against a server without time lookups."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from append_times import after, append_times
from conformance.runner import start_reference_server
from pyspark.sql import SparkSession
from servers import ServerProcess, wait_for
from source_support import parquet_rows, read_stream, run_to_parquet

from pyspark_durable_streams.client import Client, Stream

GROUPS, PER_GROUP = 3, 5


def _append_groups(stream: Stream, first: int = 0) -> list[int]:
    """Appends of five JSON messages ``{"n": …}``, each in a later millisecond than the one
    before (waited for on the clock); the append time (ms) of every message of the stream."""
    for group in range(GROUPS):
        stamps = append_times(stream)
        if stamps:
            after(stamps[-1])
        base = first + group * PER_GROUP
        stream.append_json_batch([{"n": base + i} for i in range(PER_GROUP)])
    return append_times(stream)


def _ns(spark: SparkSession, **options: str) -> list[int]:
    reader = spark.read.format("durable_streams")
    for key, value in options.items():
        reader = reader.option(key, value)
    return [json.loads(row["value"])["n"] for row in reader.load().orderBy("offset").collect()]


@pytest.fixture
def timed(server: ServerProcess) -> tuple[str, list[int]]:
    """A stream of 15 messages appended at three distinct times, and every message's time."""
    url = server.stream_url("timed")
    with Client(server.url) as client:
        stream = client.stream(url)
        stream.create("application/json")
        stamps = _append_groups(stream)
    assert stamps[PER_GROUP - 1] < stamps[PER_GROUP] and stamps[2 * PER_GROUP - 1] < stamps[2 * PER_GROUP]
    return url, stamps


def test_batch_reads_start_and_end_by_time(spark: SparkSession, timed: tuple[str, list[int]]) -> None:
    url, stamps = timed
    second, third = stamps[PER_GROUP], stamps[2 * PER_GROUP]
    assert _ns(spark, url=url, startingTimestamp=str(second)) == list(range(5, 15))
    assert _ns(spark, url=url, startingTimestamp=str(stamps[PER_GROUP - 1] + 1)) == list(range(5, 15))
    assert _ns(spark, url=url, startingTimestamp="0") == list(range(15))
    assert _ns(spark, url=url, endingTimestamp=str(third)) == list(range(10))
    assert _ns(spark, url=url, startingTimestamp=str(second), endingTimestamp=str(third)) == list(range(5, 10))
    assert _ns(spark, url=url, endingTimestamp=str(stamps[-1] + 1)) == list(range(15))  # after all: the tail
    by_stream = json.dumps({url: third})
    assert _ns(spark, url=url, startingOffsetsByTimestamp=by_stream) == list(range(10, 15))
    # A start after every message: an error naming the option, or (strategy latest) the tail.
    after = str(stamps[-1] + 1)
    with pytest.raises(Exception, match=r"startingTimestamp.*startingOffsetsByTimestampStrategy=latest"):
        _ns(spark, url=url, startingTimestamp=after)
    assert _ns(spark, url=url, startingTimestamp=after, startingOffsetsByTimestampStrategy="latest") == []
    with pytest.raises(Exception, match="startingOffsetsByTimestamp"):
        _ns(spark, url=url, startingOffsetsByTimestamp=json.dumps({url: int(after)}))


def test_streaming_starts_by_time_then_continues_from_its_checkpoint(
    spark: SparkSession, server: ServerProcess, timed: tuple[str, list[int]], tmp_path: Path
) -> None:
    url, stamps = timed
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_to_parquet(read_stream(spark, url=url, startingTimestamp=str(stamps[PER_GROUP])), out, checkpoint)
    assert sorted(json.loads(r["value"])["n"] for r in parquet_rows(spark, out)) == list(range(5, 15))
    with Client(server.url) as client:
        client.stream(url).append_json_batch([{"n": n} for n in range(15, 18)])
    # A restart continues from its checkpoint; the starting time applies to a new query only.
    run_to_parquet(read_stream(spark, url=url, startingTimestamp=str(stamps[PER_GROUP])), out, checkpoint)
    assert sorted(json.loads(r["value"])["n"] for r in parquet_rows(spark, out)) == list(range(5, 18))

    # strategy latest: a new query starting after every message reads only what comes next.
    later_out, later_checkpoint = tmp_path / "later", tmp_path / "later-checkpoint"
    future = str(int(time.time() * 1000) + 60_000)
    latest = {"startingTimestamp": future, "startingOffsetsByTimestampStrategy": "latest"}
    df = read_stream(spark, url=url, **latest)
    query = df.writeStream.format("parquet").option("path", str(later_out))
    running = query.option("checkpointLocation", str(later_checkpoint)).trigger(processingTime="0 seconds").start()
    try:
        wait_for(lambda: running.lastProgress is not None, timeout_s=120)
        with Client(server.url) as client:
            client.stream(url).append_json_batch([{"n": n} for n in range(18, 20)])
        wait_for(lambda: sum(p["numInputRows"] for p in running.recentProgress) >= 2, timeout_s=120)
    finally:
        running.stop()
    assert sorted(json.loads(r["value"])["n"] for r in parquet_rows(spark, later_out)) == [18, 19]


def test_ending_timestamp_is_for_batch_reads(spark: SparkSession, timed: tuple[str, list[int]], tmp_path: Path) -> None:
    url, stamps = timed
    df = read_stream(spark, url=url, endingTimestamp=str(stamps[-1]))
    with pytest.raises(Exception, match=r"endingTimestamp.*batch"):
        run_to_parquet(df, tmp_path / "out", tmp_path / "checkpoint")


def test_a_server_without_time_lookups_is_a_clear_error(spark: SparkSession, tmp_path: Path) -> None:
    with start_reference_server(tmp_path / "ref", 0) as ref, Client(ref.url) as client:
        url = f"{ref.url}/v1/stream/ref-times"
        client.stream(url).create("application/json")
        client.stream(url).append_json_batch([{"n": 1}])
        with pytest.raises(Exception, match=r"startingTimestamp.*time lookups"):
            _ns(spark, url=url, startingTimestamp="0")
