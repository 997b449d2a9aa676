"""The sink's batch writes, routing, payloads and failures (real server, shared ``local[2]`` session)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from servers import ServerProcess, free_port
from sink_support import SCHEMA, read_bytes, read_json, write_input

from pyspark_durable_streams.client import Client


def _rows(spark: SparkSession, n: int) -> DataFrame:
    """``n`` rows (f, i, k) in two partitions, each holding its rows in order."""
    return spark.range(n).selectExpr("CAST(id % 2 AS INT) AS f", "CAST(id AS INT) AS i", "id AS k").repartition(2, "f")


def _save(df: DataFrame, **options: str) -> None:
    df.write.format("durable_streams").mode("append").options(**options).save()


def _create(url: str, content_type: str) -> None:
    with Client(url) as client:
        client.stream(url).create(content_type)


def _fails(excinfo: pytest.ExceptionInfo[BaseException], *needles: str) -> None:
    text = str(excinfo.value)
    for needle in needles:
        assert needle in text, f"{needle!r} not in the error:\n{text[:3000]}"


def test_batch_write_creates_and_closes_the_stream(spark: SparkSession, server: ServerProcess) -> None:
    url = server.stream_url("batch-close")
    _save(_rows(spark, 1000), url=url, createStream="true", ttlSeconds="3600", closeStream="true")
    rows = read_json(url)
    assert sorted(row["k"] for row in rows) == list(range(1000))
    assert rows[0].keys() == {"f", "i", "k"}  # Spark's JSON of the row
    with Client(url) as client:
        meta = client.stream(url).metadata()
    assert meta.closed and meta.content_type == "application/json" and meta.ttl_seconds == 3600

    # A closed stream refuses the next job at save(), naming the reason.
    with pytest.raises(Exception) as excinfo:
        _save(_rows(spark, 10), url=url)
    _fails(excinfo, "is closed")


def test_second_identical_batch_job_appends_again_unless_it_reuses_the_producer_id(
    spark: SparkSession, server: ServerProcess
) -> None:
    fresh = server.stream_url("batch-twice")
    _save(_rows(spark, 500), url=fresh, createStream="true")
    _save(_rows(spark, 500), url=fresh)  # a new random identity: documented to append again
    assert sorted(row["k"] for row in read_json(fresh)) == sorted(list(range(500)) * 2)

    pinned = server.stream_url("batch-pinned")
    _save(_rows(spark, 500), url=pinned, createStream="true", producerId="nightly-2024-01-01")
    _save(_rows(spark, 500), url=pinned, producerId="nightly-2024-01-01")  # same triples: all 204
    assert sorted(row["k"] for row in read_json(pinned)) == list(range(500))


def test_per_row_routing_by_stream_column(spark: SparkSession, server: ServerProcess) -> None:
    df = _rows(spark, 3000).selectExpr("*", "concat('routed/s', CAST(k % 3 AS STRING)) AS stream")
    _save(df, server=server.url, createStream="true", maxBatchMessages="100")
    for s in range(3):
        rows = read_json(server.stream_url(f"routed/s{s}"))
        assert sorted(row["k"] for row in rows) == list(range(s, 3000, 3))
        assert all(row.keys() == {"f", "i", "k"} for row in rows)  # the routing column is not payload
        for f in (0, 1):
            lines = [row["i"] for row in rows if row["f"] == f]
            assert lines == sorted(lines)  # per-partition order

    # The bucketed surface: stream ids inside a bucket.
    with Client(server.url) as client:
        client.bucket("sinkbucket").create()
    df = _rows(spark, 40).selectExpr("CAST(k AS STRING) AS value", "IF(k < 20, 'low', 'high') AS stream")
    _save(df, server=server.url, bucket="sinkbucket", createStream="true", contentType="text/plain")
    assert read_bytes(f"{server.url}/sinkbucket/low") == [str(k).encode() for k in range(20)]
    assert read_bytes(f"{server.url}/sinkbucket/high") == [str(k).encode() for k in range(20, 40)]


def test_value_column_binary_and_json_payloads(spark: SparkSession, server: ServerProcess) -> None:
    binary = server.stream_url("payload-bytes")
    df = spark.createDataFrame([(bytes([k, 0, 255]),) for k in range(50)], "value BINARY").coalesce(1)
    _save(df, url=binary, createStream="true")
    assert read_bytes(binary) == [bytes([k, 0, 255]) for k in range(50)]

    as_json = server.stream_url("payload-json-values")
    _create(as_json, "application/json")
    df = spark.createDataFrame([(json.dumps([k, {"a": k}]),) for k in range(30)] + [(None,)], "value STRING")
    _save(df.coalesce(1), url=as_json)
    assert read_json(as_json) == [[k, {"a": k}] for k in range(30)] + [None]  # arrays stay one message


def test_missing_value_column_for_a_byte_stream_fails_at_save(spark: SparkSession, server: ServerProcess) -> None:
    url = server.stream_url("text-stream")
    _create(url, "text/plain")
    with pytest.raises(Exception) as excinfo:
        _save(_rows(spark, 10), url=url)
    _fails(excinfo, "'text/plain'", "no 'value' column")


def test_wrong_content_type_fails_at_save(spark: SparkSession, server: ServerProcess) -> None:
    url = server.stream_url("typed")
    _create(url, "text/plain")
    df = spark.createDataFrame([("a",)], "value STRING")
    with pytest.raises(Exception) as excinfo:
        _save(df, url=url, contentType="application/json")
    _fails(excinfo, "wrong content type", "'text/plain'")
    with pytest.raises(Exception) as excinfo:
        _save(df, url=url, contentType="application/json", createStream="true")
    _fails(excinfo, "exists with another configuration", "contentType='application/json'")


def test_unreachable_server_fails_at_save_and_at_start(spark: SparkSession, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1/stream/nowhere"
    with pytest.raises(Exception) as excinfo:
        _save(_rows(spark, 10), url=url, requestTimeoutMs="2000")
    _fails(excinfo, "cannot reach the Durable Streams server", url)

    write_input(tmp_path / "in", files=1, rows_per_file=10)
    with pytest.raises(Exception) as excinfo:
        spark.readStream.schema(SCHEMA).json(str(tmp_path / "in")).writeStream.format("durable_streams").option(
            "url", url
        ).option("checkpointLocation", str(tmp_path / "checkpoint")).start().awaitTermination(60)
    _fails(excinfo, "cannot reach the Durable Streams server")


def test_routed_rows_to_an_unreachable_server_fail_the_task(
    spark: SparkSession,
) -> None:
    server = f"http://127.0.0.1:{free_port()}"
    df = spark.createDataFrame([("a", "s1")], "value STRING, stream STRING")
    with pytest.raises(Exception) as excinfo:
        _save(df, server=server, requestTimeoutMs="1000")
    _fails(excinfo, "cannot reach the Durable Streams server", "option 'server'")


def test_fenced_producer_fails_with_what_to_do(spark: SparkSession, server: ServerProcess) -> None:
    url = server.stream_url("fenced")
    _save(_rows(spark, 20), url=url, createStream="true", producerId="job", producerEpoch="5")
    with pytest.raises(Exception) as excinfo:
        _save(_rows(spark, 20), url=url, producerId="job", producerEpoch="3")
    _fails(excinfo, "fenced Producer-Id job:", "epoch 5", "higher 'producerEpoch'")
    assert len(read_json(url)) == 20


def test_stream_closed_under_a_running_query_fails_it(
    spark: SparkSession, server: ServerProcess, tmp_path: Path
) -> None:
    url = server.stream_url("closed-later")
    _create(url, "application/json")
    write_input(tmp_path / "in", files=1, rows_per_file=10)
    query = (
        spark.readStream.schema(SCHEMA)
        .json(str(tmp_path / "in"))
        .writeStream.format("durable_streams")
        .option("url", url)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        with Client(url) as client:
            client.stream(url).close()
        write_input(tmp_path / "in", files=1, rows_per_file=10, start_file=1)
        with pytest.raises(Exception) as excinfo:
            query.awaitTermination(60)
        _fails(excinfo, "is closed")
    finally:
        query.stop()
    assert len(read_json(url)) == 10


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({}, "exactly one target"),
        ({"url": "http://x/v1/stream/a", "server": "http://x"}, "exactly one target"),
        ({"url": "ftp://x/a"}, "option 'url' must be an http"),
        ({"url": "http://x/v1/stream/a", "bucket": "b"}, "option 'bucket' needs option 'server'"),
        ({"url": "http://x/v1/stream/a", "maxBatchBytes": "0"}, "'maxBatchBytes' must be a positive integer"),
        ({"url": "http://x/v1/stream/a", "startingOffsets": "earliest"}, "unknown write option(s)"),
        ({"url": "http://x/v1/stream/a", "_testFailAfterRequests": "1"}, "DURABLE_STREAMS_TEST_HOOKS=1"),
        ({"server": "http://x"}, "string column 'stream'"),
    ],
)
def test_bad_options_fail_at_save_naming_the_option(spark: SparkSession, options: dict[str, str], needle: str) -> None:
    with pytest.raises(Exception) as excinfo:
        _save(_rows(spark, 1), **options)
    _fails(excinfo, needle)


def test_overwrite_mode_is_refused(spark: SparkSession, server: ServerProcess) -> None:
    with pytest.raises(Exception) as excinfo:
        _rows(spark, 1).write.format("durable_streams").mode("overwrite").option("url", server.stream_url("x")).save()
    _fails(excinfo, "only appends")
