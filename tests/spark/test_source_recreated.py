"""A stream deleted (and created again) under a running or stopped query: data loss, never a silent skip.

Each new incarnation of a path starts its offsets over; the source keeps the incarnation the
server names (``Stream-Incarnation``) in its Spark offset and compares it with the server's.
"""

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


def _fill(stream: Stream, gen: int, count: int) -> str:
    """Create (again) with ``count`` messages ``{"gen", "i"}``; the new incarnation's token."""
    stream.create("application/json")
    stream.append_json_batch([{"gen": gen, "i": i} for i in range(count)])
    incarnation = stream.metadata().incarnation
    assert incarnation is not None
    return incarnation


def _values(rows: list[dict[str, object]]) -> list[tuple[int, int]]:
    parsed = [json.loads(row["value"]) for row in rows]  # type: ignore[arg-type]
    return sorted((value["gen"], value["i"]) for value in parsed)


def _expected(*generations: tuple[int, int]) -> list[tuple[int, int]]:
    return [(gen, i) for gen, count in generations for i in range(count)]


def _running(spark: SparkSession, name: str, checkpoint: Path, **options: str) -> StreamingQuery:
    return (
        read_stream(spark, pollIntervalMs="100", **options)
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def _failure(query: StreamingQuery) -> str:
    wait_for(lambda: query.exception() is not None or not query.isActive, timeout_s=60)
    error = query.exception()
    assert error is not None
    return str(error)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_recreated_while_the_query_runs(
    spark: SparkSession, server: ServerProcess, client: Client, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    url = server.stream_url("recreated-live")
    stream = client.stream(url)
    old = _fill(stream, 1, 1000)
    name = f"recreated_live_{fail_on_data_loss}".lower()
    query = _running(spark, name, tmp_path / "cp", url=url, failOnDataLoss=str(fail_on_data_loss).lower())
    try:
        wait_for(lambda: spark.table(name).count() == 1000, timeout_s=60)
        stream.delete()
        new = _fill(stream, 2, 300)
        assert new != old
        if fail_on_data_loss:
            # A trigger may fall between the DELETE and the re-create: either way the old incarnation's
            # rest is lost, and the message names it (the new one exists only if the trigger came later).
            message = _failure(query)
            assert url in message and old in message and "deleted" in message
            assert _values([r.asDict() for r in spark.table(name).collect()]) == _expected((1, 1000))
            return
        wait_for(lambda: spark.table(name).count() == 1300, timeout_s=60)
        stream.append_json_batch([{"gen": 2, "i": i} for i in range(300, 1300)])  # grows past 1,000
        wait_for(lambda: spark.table(name).count() == 2300, timeout_s=60)
        query.processAllAvailable()
        rows = [r.asDict() for r in spark.table(name).collect()]
    finally:
        query.stop()
    assert query.exception() is None
    assert _values(rows) == _expected((1, 1000), (2, 1300))


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_recreated_while_the_query_is_down(
    spark: SparkSession, server: ServerProcess, client: Client, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    url = server.stream_url("recreated-down")
    stream = client.stream(url)
    old = _fill(stream, 1, 1000)
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    run_to_parquet(read_stream(spark, url=url), out, checkpoint)
    stream.delete()
    new = _fill(stream, 2, 1300)  # the new tail is past the checkpointed offset: only the incarnation tells
    df = read_stream(spark, url=url, failOnDataLoss=str(fail_on_data_loss).lower())
    if fail_on_data_loss:
        with pytest.raises(Exception) as failure:
            run_to_parquet(df, out, checkpoint)
        message = str(failure.value)
        assert url in message and old in message and new in message and "deleted and created again" in message
        assert _values(parquet_rows(spark, out)) == _expected((1, 1000))
    else:
        run_to_parquet(df, out, checkpoint)
        assert _values(parquet_rows(spark, out)) == _expected((1, 1000), (2, 1300))


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_bucket_subscription_stream_recreated(
    spark: SparkSession, server: ServerProcess, client: Client, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    bucket = client.bucket(f"recreate-{str(fail_on_data_loss).lower()}")
    bucket.create()
    stream = bucket.stream("user-1")
    old = _fill(stream, 1, 10)
    name = f"recreated_bucket_{fail_on_data_loss}".lower()
    query = _running(
        spark,
        name,
        tmp_path / "cp",
        server=server.url,
        bucket=bucket.bucket_id,
        prefix="user-",
        failOnDataLoss=str(fail_on_data_loss).lower(),
    )
    try:
        wait_for(lambda: spark.table(name).count() == 10, timeout_s=60)
        stream.delete()
        _fill(stream, 2, 25)
        if fail_on_data_loss:
            message = _failure(query)  # as above: the old incarnation is named whenever the trigger ran
            assert "user-1" in message and old in message and "deleted" in message
            assert _values([r.asDict() for r in spark.table(name).collect()]) == _expected((1, 10))
            return
        wait_for(lambda: spark.table(name).count() == 35, timeout_s=60)
        query.processAllAvailable()
        rows = [r.asDict() for r in spark.table(name).collect()]
    finally:
        query.stop()
    assert query.exception() is None
    assert _values(rows) == _expected((1, 10), (2, 25))


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_deleted_stream_not_recreated(
    spark: SparkSession, server: ServerProcess, client: Client, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    gone_url, kept_url = server.stream_url("deleted-for-good"), server.stream_url("kept")
    gone, kept = client.stream(gone_url), client.stream(kept_url)
    old = _fill(gone, 1, 5)
    _fill(kept, 3, 5)
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    urls = f"{gone_url},{kept_url}"
    run_to_parquet(read_stream(spark, urls=urls, valueType="string"), out, checkpoint)
    gone.delete()
    kept.append_json_batch([{"gen": 3, "i": i} for i in range(5, 8)])
    # (valueType: a deleted stream's content type cannot be looked up to infer the schema)
    df = read_stream(spark, urls=urls, valueType="string", failOnDataLoss=str(fail_on_data_loss).lower())
    if fail_on_data_loss:
        with pytest.raises(Exception) as failure:
            run_to_parquet(df, out, checkpoint)
        message = str(failure.value)
        assert f"stream {gone_url} was deleted (incarnation {old}" in message
        assert _values(parquet_rows(spark, out)) == _expected((1, 5), (3, 5))
    else:  # the other stream keeps going; the deleted one yields nothing
        run_to_parquet(df, out, checkpoint)
        assert _values(parquet_rows(spark, out)) == _expected((1, 5), (3, 8))
