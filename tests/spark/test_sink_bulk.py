"""The sink's bulk appends: every content type is cut into bulk requests by ``maxBatchBytes`` /
``maxBatchMessages`` where the server takes them, byte-stream rows come back from the source one
row per message with their exact bytes; on the reference Node server (no extension) the sink
falls back to plain appends (JSON arrays; one request per message)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests
from conformance.runner import start_reference_server
from pyspark.sql import SparkSession
from servers import ServerProcess
from sink_support import read_json

from pyspark_durable_streams.client import Client

TRICKY = [b"\r\n", b"\x00", b"--", b"--b\r\n\r\n--", b"\xff" * 3, "é".encode(), b"line\n"]


def _values(n: int) -> list[bytes]:
    return [TRICKY[k % len(TRICKY)] + str(k).encode() for k in range(n)]


def _post_count(server: ServerProcess, url: str) -> int:
    """Appends the server accepted (a request that overtook its predecessor on another
    connection is answered 409 and sent again: not counted), from its metrics."""
    text = requests.get(f"{server.url}/metrics", timeout=5).text
    total = 0
    for line in text.splitlines():
        if line.startswith("durable_streams_http_requests_total{") and 'method="POST"' in line and 'status="2' in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


@pytest.mark.parametrize("content_type", ["application/octet-stream", "text/plain", "application/x-ndjson"])
def test_byte_streams_round_trip_one_row_per_message(
    spark: SparkSession, server: ServerProcess, content_type: str
) -> None:
    url = server.stream_url(f"sink-bulk-{content_type.replace('/', '-')}")
    values = _values(2_000)
    frame = spark.createDataFrame([(v,) for v in values], "value BINARY").coalesce(2)
    before = _post_count(server, url)
    frame.write.format("durable_streams").mode("append").options(
        url=url, createStream="true", contentType=content_type, maxBatchMessages="300"
    ).save()
    posts = _post_count(server, url) - before
    assert 2_000 // 300 <= posts <= 2_000 // 300 + 4  # bulk requests, not one per row
    schema = "stream string, offset string, value binary, content_type string, timestamp timestamp"
    rows = spark.read.format("durable_streams").schema(schema).option("url", url).load().collect()
    # the source gives one row per message: each row's exact bytes, each its own offset
    assert sorted(bytes(r["value"]) for r in rows) == sorted(values)
    assert len({r["offset"] for r in rows}) == len(values)
    with Client(url) as client:  # and in each task's row order
        stored = [message.data for message in client.stream(url).read("-1")]
    assert sorted(stored) == sorted(values)


def test_max_batch_bytes_cuts_bulk_requests(spark: SparkSession, server: ServerProcess) -> None:
    url = server.stream_url("sink-bulk-bytes-limit")
    values = [bytes([65 + k % 26]) * 1000 for k in range(100)]
    before = _post_count(server, url)
    spark.createDataFrame([(v,) for v in values], "value BINARY").coalesce(1).write.format("durable_streams").mode(
        "append"
    ).options(url=url, createStream="true", maxBatchBytes=str(10 * 1001 + 1)).save()
    assert _post_count(server, url) - before == 10
    with Client(url) as client:
        assert [message.data for message in client.stream(url).read("-1")] == values


def test_reference_server_fallback(spark: SparkSession, tmp_path: Path) -> None:
    """No ``Stream-Bulk-Append`` in HEAD: JSON rows go as JSON arrays, byte rows one per request."""
    with start_reference_server(tmp_path / "ref", 0) as ref:
        json_url, bytes_url = f"{ref.url}/v1/stream/sink-json", f"{ref.url}/v1/stream/sink-bytes"
        rows = spark.createDataFrame([(json.dumps({"n": k}),) for k in range(500)], "value STRING").coalesce(2)
        rows.write.format("durable_streams").mode("append").options(
            url=json_url, createStream="true", contentType="application/json", maxBatchMessages="50"
        ).save()
        assert sorted(row["n"] for row in read_json(json_url)) == list(range(500))
        values = _values(60)
        spark.createDataFrame([(v,) for v in values], "value BINARY").coalesce(1).write.format("durable_streams").mode(
            "append"
        ).options(url=bytes_url, createStream="true").save()
        with Client(bytes_url) as client:
            stream = client.stream(bytes_url)
            assert not stream.metadata().bulk_append
            assert b"".join(message.data for message in stream.read("-1")) == b"".join(values)
