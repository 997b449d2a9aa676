"""Routine deletions are not data loss (``_source.deletions``): a stream deleted after the query
read all of it leaves the query quietly, while a deletion that took messages the query had not
read still fails it under ``failOnDataLoss=true``, naming the stream and how many it missed.
Real ``local[2]`` Spark, real server (its tombstones: ``engine.tombstones``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from servers import ServerProcess, wait_for
from source_support import parquet_rows, read_stream, run_to_parquet

from pyspark_durable_streams.client import Client, Stream


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with Client(server.url) as c:
        yield c


def _fill(stream: Stream, tag: str, count: int, first: int = 0) -> None:
    stream.append_json_batch([{"s": tag, "i": i} for i in range(first, first + count)])


def _values(rows: list[dict[str, object]]) -> list[tuple[str, int]]:
    parsed = [json.loads(str(row["value"])) for row in rows]
    return sorted((value["s"], value["i"]) for value in parsed)


def _running(spark: SparkSession, name: str, checkpoint: Path, **options: str) -> StreamingQuery:
    return (
        read_stream(spark, pollIntervalMs="100", valueType="string", **options)
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def test_a_bucket_subscription_survives_routine_deletions_and_fails_on_lost_messages(
    spark: SparkSession, server: ServerProcess, client: Client, tmp_path: Path
) -> None:
    bucket = client.bucket("sessions-deleted")
    bucket.create()
    sessions = {name: bucket.stream(name) for name in ("session-1", "session-2")}
    for name, stream in sessions.items():
        stream.create("application/json")
        _fill(stream, name, 5)
    checkpoint = tmp_path / "cp"
    options = {"server": server.url, "bucket": bucket.bucket_id, "prefix": "session-", "failOnDataLoss": "true"}
    query = _running(spark, "sessions_deleted", checkpoint, **options)
    try:
        wait_for(lambda: spark.table("sessions_deleted").count() == 10, timeout_s=90)
        sessions["session-1"].delete()  # read to its end: a routine deletion
        third = bucket.stream("session-3")
        third.create("application/json")
        _fill(third, "session-3", 4)
        wait_for(lambda: spark.table("sessions_deleted").count() == 14, timeout_s=90)
        sessions["session-2"].delete()
        _fill(third, "session-3", 3, first=4)
        wait_for(lambda: spark.table("sessions_deleted").count() == 17, timeout_s=90)
        query.processAllAvailable()
        assert query.isActive and query.exception() is None
        rows = [row.asDict() for row in spark.table("sessions_deleted").collect()]
    finally:
        query.stop()
    expected = [(f"session-{n}", i) for n, count in ((1, 5), (2, 5), (3, 7)) for i in range(count)]
    assert _values(rows) == expected

    # The query is down; session-3 gets 6 more messages, then is deleted: those 6 were never read.
    _fill(third, "session-3", 6, first=7)
    third.delete()
    out = tmp_path / "out"
    with pytest.raises(Exception) as failure:
        run_to_parquet(read_stream(spark, valueType="string", **options), out, checkpoint)
    message = str(failure.value)
    assert "stream session-3 was deleted" in message and "6 message(s) this query had not read" in message


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_named_streams_deleted_while_the_query_is_down(
    spark: SparkSession, server: ServerProcess, client: Client, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    read_url, lossy_url, kept_url = (
        server.stream_url(f"{name}-{fail_on_data_loss}") for name in ("read", "lossy", "kept")
    )
    streams = {url: client.stream(url) for url in (read_url, lossy_url, kept_url)}
    for url, stream in streams.items():
        stream.create("application/json")
        _fill(stream, url.rsplit("/", 1)[1], 3)
    urls = ",".join(streams)
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    run_to_parquet(read_stream(spark, urls=urls, valueType="string"), out, checkpoint)
    streams[read_url].delete()  # fully read
    df = read_stream(spark, urls=urls, valueType="string", failOnDataLoss="true")
    _fill(streams[kept_url], kept_url.rsplit("/", 1)[1], 2, first=3)
    run_to_parquet(df, out, checkpoint)  # the deleted stream leaves quietly, even with failOnDataLoss=true
    kept = kept_url.rsplit("/", 1)[1]
    assert [value for value in _values(parquet_rows(spark, out)) if value[0] == kept] == [(kept, i) for i in range(5)]

    # Now a stream with 4 unread messages is deleted.
    _fill(streams[lossy_url], lossy_url.rsplit("/", 1)[1], 4, first=3)
    streams[lossy_url].delete()
    df = read_stream(spark, urls=urls, valueType="string", failOnDataLoss=str(fail_on_data_loss).lower())
    if fail_on_data_loss:
        with pytest.raises(Exception) as failure:
            run_to_parquet(df, out, checkpoint)
        message = str(failure.value)
        assert f"stream {lossy_url} was deleted" in message and "4 message(s) this query had not read" in message
    else:
        run_to_parquet(df, out, checkpoint)  # logged; the others go on
        assert len(parquet_rows(spark, out)) == 3 + 3 + 5
