"""Direct history reads of large flushes: row groups holding only the stream's messages are read
without the ``stream_uid``/``kind`` columns and, wholly inside a partition, without a filter; a
partition edge inside such a row group filters by sequence number. The rows stay exactly those
of an HTTP read."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq
from direct_support import FAST, fill, flushed, offset_at, same_both_ways, same_both_ways_between
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType
from servers import ServerProcess, session, wait_for

from pyspark_durable_streams._connect import connect
from pyspark_durable_streams._source.direct_plans import DirectRange, plan_stream
from pyspark_durable_streams._source.direct_reads import _runs, read_direct
from pyspark_durable_streams._source.task_reader import StreamRange, read_range
from pyspark_durable_streams.options import ReadOptions, parse_read_options
from pyspark_durable_streams.source import infer_schema

COUNT = 20_000
PER_POST = 5_000  # ~600 KB a request, more than one ~512 KiB row group per flush
MESSAGES = [json.dumps({"i": i, "pad": "y" * (60 + i % 50)}, separators=(",", ":")).encode() for i in range(COUNT)]


def _classes(url: str, first: int, end: int) -> Counter[str]:
    """How the direct read of ``[first, end)`` reads its row groups (per run of row groups)."""
    options = parse_read_options({"url": url})
    with connect(options.connection, url) as client:
        partitions, boundary = plan_stream(client, url, url, offset_at(first), offset_at(end), 100_000)
    assert boundary == offset_at(end)
    found: Counter[str] = Counter()
    for part in partitions:
        for planned in part.files:
            assert planned.local is not None
            found.update(rows for rows, _ in _runs(pq.ParquetFile(planned.local).metadata, planned.row_groups, part))
    return found


def _planned(
    server: ServerProcess, name: str, first: int, end: int, *, file_per_post: bool = False
) -> tuple[ReadOptions, StructType, list[DirectRange], list[dict[str, Any]]]:
    """A stream of 12,000 messages in Delta (with ``file_per_post``, each POST's messages
    flushed before the next POST: a file each); its plan's partitions of ``[first, end)`` and
    the rows an HTTP read of that range gives."""
    url = server.stream_url(name)
    http = session()
    if file_per_post:
        fill(http, url, "application/json", [])
        for at in range(0, 12_000, PER_POST):
            chunk = MESSAGES[at : min(at + PER_POST, 12_000)]
            body = b"[" + b",".join(chunk) + b"]"
            assert http.post(url, headers={"Content-Type": "application/json"}, data=body).status_code == 204
            wait_for(lambda at=at, chunk=chunk: flushed(url, at + len(chunk)), timeout_s=60)  # type: ignore[misc]
    else:
        fill(http, url, "application/json", MESSAGES[:12_000], per_request=PER_POST)
    wait_for(lambda: flushed(url, 12_000), timeout_s=60)
    options = parse_read_options({"url": url})
    schema = infer_schema(options)
    with connect(options.connection, url) as client:
        partitions, _ = plan_stream(client, url, url, offset_at(first), offset_at(end), 100_000)
    over_http = [
        row
        for batch in read_range(options, schema, StreamRange(url, url, offset_at(first), offset_at(end), "arrow"))
        for row in batch.to_pylist()
    ]
    return options, schema, list(partitions), over_http


def test_large_flushes_read_whole_row_groups_and_cut_at_partition_edges(
    spark: SparkSession, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(*FAST)
    url = server.stream_url("large")
    fill(session(), url, "application/json", MESSAGES, per_request=PER_POST)
    wait_for(lambda: flushed(url, COUNT), timeout_s=60)

    whole = _classes(url, 0, COUNT)
    assert whole["all"] > 0  # row groups of this stream's messages only, read without a filter
    inside = _classes(url, 1_234, 17_000)
    assert inside["stream"] > 0 and inside["all"] > 0  # edges inside row groups: filtered by seq

    # Spark's direct reads here cut every 500 messages where a row group may be split (the 9 of the
    # small streams' tests made 300-400 tasks of this stream, each decoding a ~500 KiB row group to
    # keep 9 of its rows: some 30 s). The ranged read still has partition edges inside row groups
    # (from 1,234 to the next row group, in partitions filtered by seq) and whole row groups read unfiltered;
    # cuts anywhere inside row groups are the next test's, read without Spark.
    rows = same_both_ways(spark, url=url, per_partition=500)
    assert [row[1] for row in rows] == [offset_at(i) for i in range(COUNT)]
    assert [row[2].encode() for row in rows] == MESSAGES
    ranged = same_both_ways_between(spark, url, 1_234, 17_000, per_partition=500)
    assert ranged == rows[1_234:17_000]


def test_partition_edges_inside_row_groups_read_exactly_their_messages(
    server_factory: Callable[..., ServerProcess],
) -> None:
    """Partitions of a few hundred messages each start and end inside row groups."""
    options, schema, partitions, over_http = _planned(server_factory(*FAST), "edges", 777, 11_111)
    for cut in (333, 2_500, 5_001):  # partitions cut anywhere, as a range of other streams' row groups is
        direct = []
        for part in partitions:
            for lo in range(part.first, part.end, cut):
                piece = dataclasses.replace(part, first=lo, end=min(part.end, lo + cut))
                direct += [row for batch in read_direct(options, schema, piece) for row in batch.to_pylist()]
        assert direct == over_http
    assert len(over_http) == 11_111 - 777


def test_a_plan_out_of_order_or_short_of_a_file_is_read_again_the_careful_way(
    server_factory: Callable[..., ServerProcess],
) -> None:
    """The fallback of ``read_direct``: a partition whose files come in the wrong order (its first
    batch does not continue the range) is read again whole and sorted; one missing a file (a gap)
    is re-planned. Either way the rows are exactly the HTTP read's."""
    options, schema, partitions, over_http = _planned(server_factory(*FAST), "fallbacks", 0, 12_000, file_per_post=True)
    several = [part for part in partitions if len(part.files) > 1]
    assert several, "the test needs a partition over more than one file"
    for part in partitions:
        changed = [part]
        if len(part.files) > 1:
            changed = [
                dataclasses.replace(part, files=tuple(reversed(part.files))),  # out of order
                dataclasses.replace(part, files=part.files[:1] + part.files[2:]),  # a file missing: a gap or short
            ]
        expected = [row for row in over_http if part.first <= int(row["offset"].split("_")[0]) < part.end]
        for piece in changed:
            direct = [row for batch in read_direct(options, schema, piece) for row in batch.to_pylist()]
            assert direct == expected
