"""Helpers for the source tests: raw views of what a server holds, and query plumbing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from multipart_parsing import read_all_parts
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from servers import session


def server_messages(stream_url: str) -> list[tuple[str, bytes]]:
    """(Stream-Offset, body) of every message, straight from the multipart extension."""
    with session() as http:
        parts, _ = read_all_parts(http, stream_url, "-1")
    return [(part.header("stream-offset"), part.body) for part in parts]


@contextmanager
def spark_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """The session's ``key`` set to ``value`` for the block, then restored."""
    before = spark.conf.get(key)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        spark.conf.set(key, before)


def read_stream(spark: SparkSession, **options: str) -> DataFrame:
    reader = spark.readStream.format("durable_streams")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def run_to_parquet(
    df: DataFrame, out: Path, checkpoint: Path, *, available_now: bool = True, timeout_s: float = 120
) -> StreamingQuery:
    writer = df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
    if available_now:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination(timeout_s)
    else:
        query = writer.trigger(processingTime="0 seconds").start()
        query.processAllAvailable()
        query.stop()
    if query.exception() is not None:
        raise AssertionError(f"query failed: {query.exception()}")
    return query


def parquet_rows(spark: SparkSession, out: Path) -> list[dict[str, Any]]:
    return [row.asDict() for row in spark.read.parquet(str(out)).collect()]


def batches_with_rows(query: StreamingQuery) -> int:
    return sum(1 for progress in query.recentProgress if progress["numInputRows"] > 0)
