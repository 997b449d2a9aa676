"""Option ``consumer``: a streaming query's committed progress on the server, so its lag shows in
``/metrics`` and ``GET /v1/consumers`` (``_source.consumer_progress``). Real ``local[2]`` Spark,
real server: the lag matches what the query has not read, is 0 once it caught up, and a failed
batch does not move it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from servers import ServerProcess, wait_for
from source_support import read_stream, run_to_parquet

from pyspark_durable_streams.client import Client, Stream

CONSUMER = "spark-etl"


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with Client(server.url) as c:
        yield c


def _lag(http: requests.Session, server: ServerProcess, stream: str) -> tuple[str, int, int] | None:
    """(offset, lag in messages, lag in bytes) of the consumer in ``stream``, from ``/metrics`` and
    ``/v1/consumers`` (which must agree); ``None`` before anything was recorded."""
    rows = [row for row in http.get(f"{server.url}/v1/consumers").json()["consumers"] if row["stream"] == stream]
    metrics = http.get(f"{server.url}/metrics").text
    pattern = rf'^durable_streams_consumer_lag_(messages|bytes)\{{consumer="{CONSUMER}",stream="{stream}"\}} (\S+)$'
    exported = {kind: float(value) for kind, value in re.findall(pattern, metrics, re.MULTILINE)}
    if not rows:
        assert not exported
        return None
    (row,) = rows
    assert exported == {"messages": row["lag_messages"], "bytes": row["lag_bytes"]}
    return row["offset"], row["lag_messages"], row["lag_bytes"]


def _offset(seq: int) -> str:
    return f"{seq:016d}_{0:016d}"


def _append(stream: Stream, first: int, count: int) -> None:
    for i in range(first, first + count):
        stream.append(f"m{i:03d}".encode())  # 4 bytes each


def _start(df: DataFrame, checkpoint: Path, sink: Path, fail_on: str | None = None) -> StreamingQuery:
    def write(batch: DataFrame, batch_id: int) -> None:
        values = [row.value for row in batch.select("value").collect()]
        if fail_on is not None and fail_on in values:
            raise RuntimeError(f"cannot process {fail_on}")
        (sink / f"{batch_id}.txt").write_text("\n".join(values))

    return (
        df.writeStream.foreachBatch(write)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def test_the_consumers_lag_is_what_the_query_has_not_read(
    spark: SparkSession, server: ServerProcess, client: Client, http: requests.Session, tmp_path: Path
) -> None:
    url = server.stream_url("lagged")
    stream = client.stream(url)
    stream.create("text/plain")
    _append(stream, 0, 10)
    checkpoint, sink = tmp_path / "cp", tmp_path / "sink"
    sink.mkdir()
    options = {"url": url, "consumer": CONSUMER, "maxMessagesPerTrigger": "4", "pollIntervalMs": "100"}

    def caught_up(tail: int) -> None:
        """A run of the query to the stream's end: then the consumer's lag is 0."""
        query = _start(read_stream(spark, **options), checkpoint, sink)
        try:
            query.processAllAvailable()
            wait_for(lambda: _lag(http, server, "v1/stream/lagged") == (_offset(tail), 0, 0), timeout_s=60)
        finally:
            query.stop()
        assert query.exception() is None

    caught_up(10)

    # The query is down: 5 more messages are what it has not read.
    _append(stream, 10, 5)
    assert _lag(http, server, "v1/stream/lagged") == (_offset(10), 5, 20)

    # A batch that fails is not committed: the consumer stays where it was.
    query = _start(read_stream(spark, **options), checkpoint, sink, fail_on="m012")
    wait_for(lambda: query.exception() is not None or not query.isActive, timeout_s=90)
    assert "cannot process m012" in str(query.exception())
    assert _lag(http, server, "v1/stream/lagged") == (_offset(10), 5, 20)

    # Running again, it catches up: 0.
    caught_up(15)


def test_a_bad_consumer_name_fails_at_load(spark: SparkSession, server: ServerProcess) -> None:
    with pytest.raises(Exception, match="option 'consumer' must be 1 to 200 characters"):
        read_stream(spark, url=server.stream_url("x"), consumer="no spaces allowed")


def test_an_available_now_run_records_its_last_batch(
    spark: SparkSession, server: ServerProcess, client: Client, http: requests.Session, tmp_path: Path
) -> None:
    """Spark asks for offsets once more after the last batch to learn that nothing is left: the
    last batch's end is recorded then (``_source.consumer_progress``)."""
    url = server.stream_url("available-now")
    stream = client.stream(url)
    stream.create("text/plain")
    _append(stream, 0, 7)
    options = {"url": url, "consumer": CONSUMER, "maxMessagesPerTrigger": "3"}
    run_to_parquet(read_stream(spark, **options), tmp_path / "out", tmp_path / "cp")
    assert _lag(http, server, "v1/stream/available-now") == (_offset(7), 0, 0)
