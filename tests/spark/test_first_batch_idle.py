"""A query whose initial offset is already the streams' tails (``startingOffsets=latest``, nothing
appended since) runs its first batch once: the first batch's end carries its start
(``_source.first_batch``), the next start reads as the initial offset again, and that batch is not
taken for a first one (its end would differ from its start in text alone, and Spark would run
empty batches without end: ``Trigger.AvailableNow`` would never finish)."""

from __future__ import annotations

from pathlib import Path

from driver_fakes import SCHEMA
from pyspark.sql import SparkSession
from servers import ServerProcess
from source_support import read_stream, run_to_parquet

from pyspark_durable_streams.client import Client
from pyspark_durable_streams.options import parse_read_options
from pyspark_durable_streams.source import DurableStreamsStreamReader


def stream_with_messages(server: ServerProcess, name: str) -> str:
    """The URL of a new stream holding three messages."""
    url = server.stream_url(name)
    with Client(server.url) as client:
        client.stream(url).create("application/json")
        client.stream(url).append_json_batch([{"n": n} for n in range(3)])
    return url


def test_only_the_first_batch_is_first_though_a_later_start_reads_as_the_initial_offset(server: ServerProcess) -> None:
    url = stream_with_messages(server, "idle-first")
    reader = DurableStreamsStreamReader(parse_read_options({"url": url, "startingOffsets": "latest"}), SCHEMA)
    try:
        initial = reader.initialOffset()
        first = reader.latestOffset(initial, None)  # (Spark plans a first batch even with nothing new)
        assert first[""]["first_start"] == {key: value for key, value in initial.items() if key}
        second = reader.latestOffset(first, None)
        assert second == initial  # the same offsets, without the first batch's start
        assert reader.latestOffset(second, None) == second  # nothing new: no batch to run
    finally:
        reader.stop()


def test_available_now_on_idle_streams_from_latest_ends(
    spark: SparkSession, server: ServerProcess, tmp_path: Path
) -> None:
    url = stream_with_messages(server, "idle-available-now")
    checkpoint = tmp_path / "checkpoint"
    query = run_to_parquet(
        read_stream(spark, url=url, startingOffsets="latest"), tmp_path / "out", checkpoint, timeout_s=60
    )
    finished = not query.isActive
    query.stop()
    assert finished, "Trigger.AvailableNow did not end"
    logged = [path for path in (checkpoint / "offsets").iterdir() if path.name.isdigit()]
    assert len(logged) <= 2  # the first batch, and the one that drops the first batch's start
