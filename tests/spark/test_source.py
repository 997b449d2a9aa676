"""The ``durable_streams`` source against real servers (ours and the reference Node server)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conformance.runner import start_reference_server
from pyspark.sql import SparkSession
from servers import ServerProcess, wait_for
from source_support import (
    batches_with_rows,
    parquet_rows,
    read_stream,
    run_to_parquet,
    server_messages,
)

from pyspark_durable_streams.client import Client

HERE = Path(__file__).resolve().parent


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with Client(server.url) as c:
        yield c


def _batch(spark: SparkSession, **options: str) -> list[dict[str, object]]:
    reader = spark.read.format("durable_streams")
    for key, value in options.items():
        reader = reader.option(key, value)
    return [row.asDict() for row in reader.load().collect()]


# -- batch reads ---------------------------------------------------------------------------------


def test_batch_read_json_text_binary_with_offsets(spark: SparkSession, server: ServerProcess, client: Client) -> None:
    payloads: dict[str, tuple[str, list[bytes]]] = {
        "json": ("application/json", [json.dumps({"i": i}, separators=(",", ":")).encode() for i in range(25)]),
        "text": ("text/plain", [f"line {i} é".encode() for i in range(25)]),
        "bin": ("application/octet-stream", [bytes([i, 0, 255, i]) * (i + 1) for i in range(25)]),
    }
    for name, (content_type, messages) in payloads.items():
        stream = client.stream(f"v1/stream/batch-{name}")
        stream.create(content_type)
        if content_type == "application/json":
            stream.append_json_batch([json.loads(m) for m in messages[:10]])
            for message in messages[10:]:
                stream.append(message)
        else:
            for message in messages:
                stream.append(message)

    for name, (content_type, messages) in payloads.items():
        url = server.stream_url(f"batch-{name}")
        expected = server_messages(url)
        assert [body for _, body in expected] == messages
        df = spark.read.format("durable_streams").option("url", url).option("messagesPerPartition", "7").load()
        assert df.rdd.getNumPartitions() == 4  # 25 messages split by sequence into 4 ranges
        rows = [row.asDict() for row in df.collect()]
        assert [(r["offset"], r["stream"], r["content_type"]) for r in rows] == [
            (offset, url, content_type) for offset, _ in expected
        ]
        values = [r["value"] if name == "bin" else r["value"].encode() for r in rows]
        assert values == messages
        assert all(r["timestamp"] is not None for r in rows)
    assert dict(spark.read.format("durable_streams").option("url", url).load().dtypes)["value"] == "binary"

    # startingOffsets / endingOffsets pick exactly the messages in between.
    url = server.stream_url("batch-json")
    offsets = [offset for offset, _ in server_messages(url)]
    rows = _batch(
        spark,
        url=url,
        startingOffsets=json.dumps({url: offsets[3]}),
        endingOffsets=json.dumps({url: offsets[9]}),
    )
    assert [r["offset"] for r in rows] == offsets[3:9]


def test_user_schema_parses_json_columns(spark: SparkSession, server: ServerProcess, client: Client) -> None:
    stream = client.stream("v1/stream/parsed")
    stream.create("application/json")
    stream.append_json_batch([{"id": 1, "name": "a"}, {"id": 2}, {"id": "not a number", "name": "c"}])
    df = (
        spark.read.format("durable_streams")
        .schema("id long, name string, offset string")
        .option("url", server.stream_url("parsed"))
        .load()
    )
    rows = [tuple(row) for row in df.collect()]
    assert [(i, n) for i, n, _ in rows] == [(1, "a"), (2, None), (None, "c")]
    assert [o for _, _, o in rows] == [offset for offset, _ in server_messages(server.stream_url("parsed"))]


# -- streaming -----------------------------------------------------------------------------------


def test_stream_rate_limited_exactly_once_then_restart(
    spark: SparkSession, server: ServerProcess, client: Client, tmp_path: Path
) -> None:
    stream = client.stream("v1/stream/events")
    stream.create("application/json")
    stream.append_json_batch([{"n": i} for i in range(100)])
    url = server.stream_url("events")
    df = read_stream(spark, url=url, maxMessagesPerTrigger="30")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    query = run_to_parquet(df, out, checkpoint, available_now=False)
    assert batches_with_rows(query) == 4  # 30 + 30 + 30 + 10
    assert sorted(json.loads(r["value"])["n"] for r in parquet_rows(spark, out)) == list(range(100))

    stream.append_json_batch([{"n": i} for i in range(100, 150)])
    query = run_to_parquet(read_stream(spark, url=url, maxMessagesPerTrigger="30"), out, checkpoint)
    assert batches_with_rows(query) == 2  # only the 50 new messages
    rows = parquet_rows(spark, out)
    assert sorted(json.loads(r["value"])["n"] for r in rows) == list(range(150))
    assert sorted(r["offset"] for r in rows) == [offset for offset, _ in server_messages(url)]


def test_sigkill_mid_batch_then_restart_is_exactly_once(
    spark: SparkSession, server: ServerProcess, client: Client, tmp_path: Path
) -> None:
    stream = client.stream("v1/stream/killed")
    stream.create("application/json")
    for start in range(0, 4000, 1000):
        stream.append_json_batch([{"n": i} for i in range(start, start + 1000)])
    url = server.stream_url("killed")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    script = [sys.executable, str(HERE / "source_query_script.py"), url, str(out), str(checkpoint)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    proc = subprocess.Popen(script, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        # Kill while batch 1 is planned (its offsets are logged) but not committed.
        wait_for(
            lambda: (checkpoint / "offsets" / "1").exists() and proc.poll() is None, timeout_s=120, interval_s=0.02
        )
        assert not (checkpoint / "commits" / "1").exists()
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    assert parquet_rows(spark, out)  # some batches had completed
    assert len(parquet_rows(spark, out)) < 4000

    # The restart runs in this test's session (a JVM of its own, not the killed one's), which saves
    # a second Spark start-up: it replays batch 1 from the offset log and reads the rest.
    restarted = read_stream(spark, url=url, maxMessagesPerTrigger="2000", messagesPerPartition="200")
    query = run_to_parquet(restarted, out, checkpoint, timeout_s=300)
    finished = not query.isActive
    query.stop()
    assert finished, "the restarted query did not finish"
    rows = parquet_rows(spark, out)
    assert len(rows) == 4000
    assert sorted(json.loads(r["value"])["n"] for r in rows) == list(range(4000))


def test_available_now_50k_backlog_in_rate_limited_batches(
    spark: SparkSession, server: ServerProcess, client: Client, tmp_path: Path
) -> None:
    stream = client.stream("v1/stream/backlog")
    stream.create("application/json")
    for start in range(0, 50_000, 10_000):
        stream.append_json_batch([{"n": i, "pad": "x" * 20} for i in range(start, start + 10_000)])
    url = server.stream_url("backlog")

    df = read_stream(spark, url=url, maxMessagesPerTrigger="12000", messagesPerPartition="6000")
    query = run_to_parquet(df, tmp_path / "out", tmp_path / "checkpoint", timeout_s=180)
    assert not query.isActive
    assert batches_with_rows(query) == 5  # 12000 x 4 + 2000
    assert sum(p["numInputRows"] for p in query.recentProgress) == 50_000
    assert spark.read.parquet(str(tmp_path / "out")).select("offset").distinct().count() == 50_000

    # Throughput of a batch read (workers are warm now); printed for the record, not asserted.
    for partitions in ("1", "2"):
        began = time.monotonic()
        df = spark.read.format("durable_streams").option("url", url).option("minPartitions", partitions).load()
        assert df.count() == 50_000
        elapsed = time.monotonic() - began
        print(
            f"batch read of 50,000 messages, {partitions} partition(s): {elapsed:.2f}s = {50_000 / elapsed:,.0f} rows/s"
        )


def test_bucket_subscription_picks_up_new_streams(
    spark: SparkSession, server: ServerProcess, client: Client, tmp_path: Path
) -> None:
    bucket = client.bucket("spark-sub")
    bucket.create()
    bucket.stream("user-1").create("application/json")
    bucket.stream("user-1").append_json_batch([{"u": 1, "i": i} for i in range(3)])
    bucket.stream("other").create("application/json")
    bucket.stream("other").append_json({"u": "other"})

    df = read_stream(spark, server=server.url, bucket="spark-sub", prefix="user-", pollIntervalMs="100")
    query = (
        df.writeStream.format("memory")
        .queryName("subscription")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: spark.table("subscription").count() == 3, timeout_s=60)
        bucket.stream("user-2").create("application/json")
        bucket.stream("user-2").append_json_batch([{"u": 2, "i": i} for i in range(4)])
        bucket.stream("user-1").append_json({"u": 1, "i": 3})
        wait_for(lambda: spark.table("subscription").count() == 8, timeout_s=60)
        time.sleep(1)  # (five more triggers that must add nothing: time itself is the condition)
        rows = spark.table("subscription").collect()
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(r["stream"] for r in rows) == ["user-1"] * 4 + ["user-2"] * 4
    got = sorted((json.loads(r["value"])["u"], json.loads(r["value"])["i"]) for r in rows)
    assert got == [(1, i) for i in range(4)] + [(2, i) for i in range(4)]


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_gone_after_snapshot(
    spark: SparkSession, server: ServerProcess, client: Client, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    stream = client.stream("v1/stream/retained")
    stream.create("application/json")
    stream.append_json_batch([{"n": i} for i in range(10)])
    url = server.stream_url("retained")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_to_parquet(read_stream(spark, url=url), out, checkpoint)
    assert len(parquet_rows(spark, out)) == 10

    stream.append_json_batch([{"n": i} for i in range(10, 20)])
    offsets = [offset for offset, _ in server_messages(url)]
    stream.snapshots.publish(offsets[15], b'{"state": "folded"}', content_type="application/json")

    df = read_stream(spark, url=url, failOnDataLoss=str(fail_on_data_loss).lower())
    if fail_on_data_loss:
        with pytest.raises(Exception) as failure:
            run_to_parquet(df, out, checkpoint)
        message = str(failure.value)
        assert url in message and offsets[10] in message and "failOnDataLoss=false" in message
        assert len(parquet_rows(spark, out)) == 10
    else:
        run_to_parquet(df, out, checkpoint)
        values = sorted(json.loads(r["value"])["n"] for r in parquet_rows(spark, out))
        assert values == list(range(10)) + list(range(15, 20))  # 10..14 skipped, snapshot not emitted


# -- the reference Node server ----------------------------------------------------------------------


def test_reference_server_batch_and_streaming(spark: SparkSession, tmp_path: Path) -> None:
    with start_reference_server(tmp_path / "ref", 0) as ref, Client(ref.url) as ref_client:
        url = f"{ref.url}/v1/stream/ref-json"
        stream = ref_client.stream(url)
        stream.create("application/json")
        ends = []
        for start in range(0, 40, 10):
            ends.append(stream.append_json_batch([{"n": i} for i in range(start, start + 10)]).next_offset)
        text_url = f"{ref.url}/v1/stream/ref-text"
        ref_client.stream(text_url).create("text/plain")
        for i in range(3):
            ref_client.stream(text_url).append(f"chunk {i};")

        rows = _batch(spark, url=url)
        assert [json.loads(r["value"])["n"] for r in rows] == list(range(40))
        assert rows[0]["timestamp"] is None
        # An end inside the data: exactly the messages before it, although the reference
        # server answers every read with everything up to its tail.
        rows = _batch(
            spark, url=url, startingOffsets=json.dumps({url: ends[0]}), endingOffsets=json.dumps({url: ends[2]})
        )
        assert [json.loads(r["value"])["n"] for r in rows] == list(range(10, 30))
        assert rows[0]["offset"] == ends[0]
        assert b"".join(r["value"].encode() for r in _batch(spark, url=text_url)) == b"chunk 0;chunk 1;chunk 2;"

        out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
        query = run_to_parquet(read_stream(spark, url=url, maxMessagesPerTrigger="15"), out, checkpoint)
        assert sorted(json.loads(r["value"])["n"] for r in parquet_rows(spark, out)) == list(range(40))
        assert batches_with_rows(query) == 1  # one read answers everything up to the tail
        for start in range(40, 60, 5):
            stream.append_json_batch([{"n": i} for i in range(start, start + 5)])
        query = run_to_parquet(read_stream(spark, url=url, maxMessagesPerTrigger="12"), out, checkpoint)
        assert batches_with_rows(query) == 1  # the limit applies at response boundaries only
        assert sorted(json.loads(r["value"])["n"] for r in parquet_rows(spark, out)) == list(range(60))


# -- options ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"bogusOption": "1"}, "bogusoption"),
        ({"startingOffsets": "{not json"}, "startingOffsets"),
        ({"maxMessagesPerTrigger": "-5"}, "maxMessagesPerTrigger"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"valueType": "xml"}, "valueType"),
        ({"startingTimestamp": "yesterday"}, "startingTimestamp"),
        ({"endingTimestamp": "-1"}, "endingTimestamp"),
        ({"startingOffsetsByTimestamp": "{not json"}, "startingOffsetsByTimestamp"),
        ({"startingTimestamp": "0", "startingOffsetsByTimestampStrategy": "1st"}, "startingOffsetsByTimestampStrategy"),
        ({"minMessagesPerTrigger": "none"}, "minMessagesPerTrigger"),
        ({"minMessagesPerTrigger": "5", "maxTriggerDelay": "soon"}, "maxTriggerDelay"),
    ],
)
def test_bad_options_fail_at_load(
    spark: SparkSession, server: ServerProcess, options: dict[str, str], named: str
) -> None:
    for reader_of in (lambda: spark.read, lambda: spark.readStream):
        reader = reader_of().format("durable_streams").option("url", server.stream_url("whatever"))
        for key, value in options.items():
            reader = reader.option(key, value)
        with pytest.raises(Exception, match=named):
            reader.load()
