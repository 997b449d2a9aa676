"""``startingOffsets=snapshot`` through a real ``local[2]`` session and a real server: the
stream's latest snapshot as its first row (offset and timestamp null), then exactly the
messages after it, in batch and streaming reads; once per query; a stream without a snapshot
is read from its beginning."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from servers import ServerProcess
from source_support import parquet_rows, read_stream, run_to_parquet

from pyspark_durable_streams.client import Client

SNAPSHOT = b'{"sum":21,"n":-1}'


def _offset(seq: int) -> str:
    return f"{seq:016d}_{0:016d}"


def _compacted(server: ServerProcess, name: str) -> str:
    """Messages n = 0..9, a snapshot of the first seven (before offset 7), then n = 10..12."""
    url = server.stream_url(name)
    with Client(server.url) as client:
        stream = client.stream(url)
        stream.create("application/json")
        stream.append_json_batch([{"n": n} for n in range(10)])
        stream.snapshots.publish(_offset(7), SNAPSHOT, content_type="application/json")
        stream.append_json_batch([{"n": n} for n in range(10, 13)])
    return url


def _row(row: Any) -> tuple[Any, ...]:
    return (row["offset"], json.loads(row["value"])["n"], row["content_type"], row["timestamp"] is None)


def test_a_batch_read_starts_with_the_snapshot_then_the_messages_after_it(
    spark: SparkSession, server: ServerProcess
) -> None:
    url = _compacted(server, "compacted")
    df = spark.read.format("durable_streams").option("url", url).option("startingOffsets", "snapshot").load()
    rows = df.collect()
    snapshot = [row for row in rows if row["offset"] is None]
    assert [(r["stream"], r["value"], r["content_type"], r["timestamp"]) for r in snapshot] == [
        (url, SNAPSHOT.decode(), "application/json", None)
    ]
    messages = sorted((_row(r) for r in rows if r["offset"] is not None), key=lambda r: r[0])
    assert messages == [(_offset(n), n, "application/json", False) for n in range(7, 13)]
    # A user column is parsed from the snapshot as from a message.
    parsed = spark.read.format("durable_streams").schema("offset string, n int").option("url", url)
    assert sorted(r["n"] for r in parsed.option("startingOffsets", "snapshot").load().collect()) == [-1, *range(7, 13)]


def test_a_stream_without_a_snapshot_is_read_from_its_beginning(spark: SparkSession, server: ServerProcess) -> None:
    url = server.stream_url("plain")
    with Client(server.url) as client:
        client.stream(url).create("application/json")
        client.stream(url).append_json_batch([{"n": n} for n in range(4)])
    df = spark.read.format("durable_streams").option("url", url).option("startingOffsets", "snapshot").load()
    assert sorted(json.loads(r["value"])["n"] for r in df.collect()) == [0, 1, 2, 3]


def test_a_streaming_query_emits_the_snapshot_once_then_the_messages(
    spark: SparkSession, server: ServerProcess, tmp_path: Path
) -> None:
    url = _compacted(server, "compacted-stream")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    df = read_stream(spark, url=url, startingOffsets="snapshot", maxMessagesPerTrigger="2")
    query = run_to_parquet(df, out, checkpoint)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
    assert sizes == [3, 2, 2]  # the snapshot's row joins the first batch's two messages
    rows = parquet_rows(spark, out)
    assert sorted(json.loads(r["value"])["n"] for r in rows) == [-1, *range(7, 13)]
    assert [r["offset"] for r in rows].count(None) == 1

    with Client(server.url) as client:
        client.stream(url).append_json_batch([{"n": 13}])
    run_to_parquet(read_stream(spark, url=url, startingOffsets="snapshot"), out, checkpoint)
    rows = parquet_rows(spark, out)  # the restart continues after its checkpoint: no second snapshot row
    assert sorted(json.loads(r["value"])["n"] for r in rows) == [-1, *range(7, 14)]
