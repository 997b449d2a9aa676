"""The source meets a retention policy's gap: failOnDataLoss decides, and the loss is named and counted.

A query reads 10 messages and checkpoints; 10 more are appended to a stream that keeps 5, and a
maintenance pass lets go of the 5 the query has not read. Restarted from its checkpoint, the query
fails naming the stream and the 5 lost messages (``failOnDataLoss=true``), or goes on from the
earliest retained offset with exactly what is there (``false``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from servers import ServerProcess, wait_for
from source_support import parquet_rows, read_stream, run_to_parquet

from pyspark_durable_streams.client import Client, Retention

MAINTENANCE = ("--flush-interval-ms", "50", "--compaction-interval-s", "0.3")


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_retention_gap_fails_or_skips_as_fail_on_data_loss_says(
    spark: SparkSession, server_factory: Callable[..., ServerProcess], tmp_path: Path, fail_on_data_loss: bool
) -> None:
    server = server_factory(*MAINTENANCE)
    url = server.stream_url("kept5")
    with Client(server.url) as client:
        stream = client.stream(url)
        stream.create("application/json", retention=Retention(max_messages=5))
        for n in range(10):  # (one append each: a retention point can sit between any two)
            stream.append_json_batch([{"n": n}])
        out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
        wait_for(lambda: stream.metadata().earliest_offset == "0000000000000005_0000000000000000", timeout_s=30)
        run_to_parquet(read_stream(spark, url=url, startingOffsets="earliest"), out, checkpoint)
        assert sorted(json.loads(r["value"])["n"] for r in parquet_rows(spark, out)) == list(range(5, 10))

        for n in range(10, 20):
            stream.append_json_batch([{"n": n}])
        wait_for(lambda: stream.metadata().earliest_offset == "0000000000000015_0000000000000000", timeout_s=30)

    df = read_stream(spark, url=url, failOnDataLoss=str(fail_on_data_loss).lower())
    if fail_on_data_loss:
        with pytest.raises(StreamingQueryException) as failure:
            run_to_parquet(df, out, checkpoint)
        message = str(failure.value)
        assert url in message and "5 messages (0000000000000010_0000000000000000 up to" in message, message
        assert "failOnDataLoss=false" in message
        assert len(parquet_rows(spark, out)) == 5  # (nothing of the failed batch was written)
    else:
        run_to_parquet(df, out, checkpoint)
        values = sorted(json.loads(r["value"])["n"] for r in parquet_rows(spark, out))
        assert values == list(range(5, 10)) + list(range(15, 20))  # 10..14 were removed before it read them
