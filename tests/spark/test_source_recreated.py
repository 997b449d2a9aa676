"""A stream deleted (and created again) under a running or stopped query: data loss where the
query had not read all of the old incarnation, never a silent skip; a routine re-creation of a
stream read to its end is read from its beginning (the server's tombstone tells the two apart).

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


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_recreated_after_all_was_read_while_the_query_runs(
    spark: SparkSession, server: ServerProcess, client: Client, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    """Nothing of the old incarnation was lost: with either setting the new one is read from its
    beginning (a trigger between the DELETE and the re-create sees the stream leave, and come
    back as a new one)."""
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
    stream.append_json_batch([{"gen": 1, "i": i} for i in range(1000, 1050)])  # never read: lost below
    stream.delete()
    new = _fill(stream, 2, 1300)  # the new tail is past the checkpointed offset: only the incarnation tells
    df = read_stream(spark, url=url, failOnDataLoss=str(fail_on_data_loss).lower())
    if fail_on_data_loss:
        with pytest.raises(Exception) as failure:
            run_to_parquet(df, out, checkpoint)
        message = str(failure.value)
        assert url in message and old in message and new in message and "deleted and created again" in message
        assert "50 message(s) this query had not read" in message
        assert _values(parquet_rows(spark, out)) == _expected((1, 1000))
    else:
        run_to_parquet(df, out, checkpoint)
        assert _values(parquet_rows(spark, out)) == _expected((1, 1000), (2, 1300))


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_bucket_subscription_stream_recreated_after_all_was_read(
    spark: SparkSession, server: ServerProcess, client: Client, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    """A routine re-creation (the old incarnation read to its end) goes on with either setting."""
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
        assert _fill(stream, 2, 25) != old
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
    gone.append_json_batch([{"gen": 1, "i": i} for i in range(5, 8)])  # never read: lost with the stream
    gone.delete()
    kept.append_json_batch([{"gen": 3, "i": i} for i in range(5, 8)])
    # (valueType: a deleted stream's content type cannot be looked up to infer the schema)
    df = read_stream(spark, urls=urls, valueType="string", failOnDataLoss=str(fail_on_data_loss).lower())
    if fail_on_data_loss:
        with pytest.raises(Exception) as failure:
            run_to_parquet(df, out, checkpoint)
        message = str(failure.value)
        assert f"stream {gone_url} was deleted (incarnation {old}" in message
        assert "3 message(s) this query had not read" in message
        assert _values(parquet_rows(spark, out)) == _expected((1, 5), (3, 5))
    else:  # the other stream keeps going; the deleted one yields nothing
        run_to_parquet(df, out, checkpoint)
        assert _values(parquet_rows(spark, out)) == _expected((1, 5), (3, 8))
