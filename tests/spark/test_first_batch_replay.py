"""A first batch replayed after a restart reads the range it was planned with, though Spark asks
the source for its initial offset again (``_source.first_batch``): the source's readers against a
real server, without a SparkSession (Spark's part, the offset log, is played by JSON)."""

from __future__ import annotations

import json

from driver_fakes import SCHEMA
from servers import ServerProcess

from pyspark_durable_streams._source.first_batch import batch_start, with_first_start
from pyspark_durable_streams.client import Client
from pyspark_durable_streams.options import parse_read_options
from pyspark_durable_streams.source import DurableStreamsStreamReader


def _rows(reader: DurableStreamsStreamReader, start: dict[str, object], end: dict[str, object]) -> int:
    return sum(batch.num_rows for part in reader.partitions(start, end) for batch in reader.read(part))


def test_a_replayed_first_batch_reads_what_it_was_planned_with(server: ServerProcess) -> None:
    url = server.stream_url("first-batch")
    with Client(server.url) as client:
        stream = client.stream(url)
        stream.create("application/octet-stream")
        stream.append(b"before")
        options = parse_read_options({"url": url, "startingOffsets": "latest"})
        first = DurableStreamsStreamReader(options, SCHEMA)
        initial = first.initialOffset()
        for n in range(3):
            stream.append(f"m{n}".encode())
        logged = json.loads(json.dumps(first.latestOffset(initial, None)))  # the offset log's batch 0
        first.stop()
        stream.append(b"after the crash")  # the restart's initial offset (latest) is past the logged end
        restarted = DurableStreamsStreamReader(options, SCHEMA)
        assert _rows(restarted, restarted.initialOffset(), logged) == 3
        later = restarted.latestOffset(logged, None)
        assert _rows(restarted, logged, later) == 1  # the next batch starts at the logged end
        restarted.stop()


def test_only_a_first_batch_carries_its_start() -> None:
    start = {"": {"schema": []}, "s": "0000000000000001_0000000000000000"}
    end = with_first_start({"": {"schema": []}, "s": "0000000000000004_0000000000000000"}, start)
    assert end[""] == {"schema": [], "first_start": {"s": "0000000000000001_0000000000000000"}}
    asked_again = {"": {"schema": []}, "s": "0000000000000009_0000000000000000"}
    assert batch_start(asked_again, end) == start
    assert batch_start(end, {"": {"schema": []}, "s": "0000000000000006_0000000000000000"}) == end
