"""Direct history reads: the same ranges read from the Delta files (read plans) and over HTTP
give identical rows: bytes, offsets, timestamps and order."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from direct_support import FAST, PLAN, fill, flushed, offset_at, read_rows, same_both_ways, same_both_ways_between
from pyspark.sql import SparkSession
from servers import MotoServer, ServerProcess, session, wait_for

from pyspark_durable_streams._connect import connect
from pyspark_durable_streams._source.direct_plans import DirectRange, plan_stream
from pyspark_durable_streams._source.direct_reads import read_direct
from pyspark_durable_streams.options import OptionError, parse_read_options
from pyspark_durable_streams.source import infer_schema


def _files_served(server: ServerProcess) -> float:
    text = session().get(server.url + "/metrics").text
    found = re.findall(r'durable_streams_http_requests_total\{[^}]*route="files"[^}]*\} ([0-9.e+]+)', text)
    return sum(float(value) for value in found)


def _gone(http: requests.Session, file_urls: set[str]) -> bool:
    """Whether a planned file is gone (a response cut off while it is being vacuumed: not yet)."""
    for file_url in file_urls:
        try:
            if http.get(file_url, headers={"Range": "bytes=0-0"}).status_code == 404:
                return True
        except requests.RequestException:
            continue
    return False


PAYLOADS = {
    "application/json": [json.dumps({"i": i, "pad": "x" * (i % 5)}, separators=(",", ":")).encode() for i in range(40)],
    "text/plain": [f"line {i} é\n".encode() for i in range(40)],
    "application/octet-stream": [bytes([i, 0, 255, i * 3 % 256]) * (i % 4 + 1) for i in range(40)],
}


@pytest.mark.parametrize("content_type", sorted(PAYLOADS))
def test_direct_rows_equal_http_rows(
    spark: SparkSession, server_factory: Callable[..., ServerProcess], content_type: str
) -> None:
    server = server_factory(*FAST)
    http = session()
    url = server.stream_url("identity")
    fill(http, url, content_type, PAYLOADS[content_type])
    wait_for(lambda: flushed(url, 40))
    before = _files_served(server)
    rows = same_both_ways(spark, url=url)
    assert len(rows) == 40 and _files_served(server) > before  # localFiles=false read through the file URLs
    values = [row[2] for row in rows]
    if content_type == "application/octet-stream":
        assert values == PAYLOADS[content_type]
    assert [row[1] for row in rows] == [offset_at(i) for i in range(40)]
    assert all(row[4] is not None for row in rows)
    # a range inside: start and end offsets are honoured exactly
    ranged = same_both_ways_between(spark, url, 5, 33)
    assert ranged == rows[5:33]


def test_unflushed_tail_comes_over_http(spark: SparkSession, server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory("--flush-interval-ms", "3600000")
    http = session()
    url = server.stream_url("tail")
    fill(http, url, "application/json", PAYLOADS["application/json"])
    assert len(same_both_ways(spark, url=url)) == 40


def test_fork_reads_its_inherited_part_from_the_source(
    spark: SparkSession, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(*FAST)
    http = session()
    source, fork = server.stream_url("source"), server.stream_url("fork")
    fill(http, source, "application/json", PAYLOADS["application/json"])
    headers = {"Content-Type": "application/json", "Stream-Forked-From": "/v1/stream/source"}
    assert http.put(fork, headers={**headers, "Stream-Fork-Offset": offset_at(25)}).status_code == 201
    assert (
        http.post(fork, headers={"Content-Type": "application/json"}, data=b'[{"own":1},{"own":2}]').status_code == 204
    )
    wait_for(lambda: flushed(fork, 27))
    rows = same_both_ways(spark, url=fork)
    assert [row[2] for row in rows] == [m.decode() for m in PAYLOADS["application/json"][:25]] + [
        '{"own":1}',
        '{"own":2}',
    ]


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_retention_behaves_as_over_http(
    spark: SparkSession, server_factory: Callable[..., ServerProcess], fail_on_data_loss: str
) -> None:
    server = server_factory(*FAST)
    http = session()
    url = server.stream_url("retained")
    fill(http, url, "application/json", PAYLOADS["application/json"])
    snapshot = http.put(f"{url}/snapshot/{offset_at(20)}", headers={"Content-Type": "application/json"}, data=b"{}")
    assert snapshot.status_code == 204
    wait_for(
        lambda: session().get(url, params={"offset": offset_at(20)}, headers=PLAN).json()["delta_end"] == offset_at(40)
    )
    options = {"startingOffsets": json.dumps({url: offset_at(5)}), "failOnDataLoss": fail_on_data_loss}
    if fail_on_data_loss == "true":
        for mode in ("delta", "http"):
            with pytest.raises(Exception, match="failOnDataLoss=false"):
                read_rows(spark, url=url, historyReads=mode, **options)
    else:
        rows = same_both_ways(spark, url=url, **options)
        assert [row[1] for row in rows] == [offset_at(i) for i in range(20, 40)]


def test_a_planned_file_compacted_away_is_replanned(server_factory: Callable[..., ServerProcess]) -> None:
    """Compaction rewrites and vacuums (retention 0) the files of a plan before a task reads
    them: the task re-plans and yields the same rows as HTTP."""
    server = server_factory(*FAST, "--compaction-interval-s", "1", "--vacuum-retention-hours", "0")
    http = session()
    url = server.stream_url("compacted")
    fill(http, url, "application/json", PAYLOADS["application/json"], per_request=3)
    wait_for(lambda: flushed(url, 40))
    options = parse_read_options({"url": url, "historyReads": "delta"})
    schema = infer_schema(options)
    with connect(options.connection, url) as client:
        partitions, boundary = plan_stream(client, url, url, offset_at(0), offset_at(40), 1000)
    assert boundary == offset_at(40) and all(isinstance(p, DirectRange) for p in partitions)
    planned = {file.url for part in partitions for file in part.files}

    def some_file_gone() -> bool:
        http.post(url, headers={"Content-Type": "application/json"}, data=b'[{"more":1}]')
        return _gone(http, planned)

    wait_for(some_file_gone, timeout_s=60, interval_s=0.5)
    direct = [row for part in partitions for batch in read_direct(options, schema, part) for row in batch.to_pylist()]
    http_options = parse_read_options({"url": url, "historyReads": "http"})
    from pyspark_durable_streams._source.task_reader import StreamRange, read_range

    over_http = [
        row
        for batch in read_range(http_options, schema, StreamRange(url, url, offset_at(0), offset_at(40), "arrow"))
        for row in batch.to_pylist()
    ]
    assert direct == over_http and len(direct) == 40


def test_direct_reads_on_s3(spark: SparkSession, moto: MotoServer, tmp_path: Path) -> None:
    moto.create_bucket("direct-reads")
    server = ServerProcess(tmp_path / "data", [*moto.server_args("s3://direct-reads/table"), *FAST]).start()
    try:
        http = session()
        url = server.stream_url("on-s3")
        fill(http, url, "application/json", PAYLOADS["application/json"])
        wait_for(lambda: flushed(url, 40), timeout_s=30)
        assert len(same_both_ways(spark, url=url)) == 40
        assert _files_served(server) == 0  # executors went to S3, not through the server
    finally:
        server.kill()


def test_history_reads_option_is_checked() -> None:
    with pytest.raises(OptionError, match="historyReads"):
        parse_read_options({"url": "http://127.0.0.1:1/v1/stream/x", "historyReads": "parquet"})
    assert parse_read_options({"url": "http://127.0.0.1:1/v1/stream/x"}).history_reads == "auto"


def test_delta_mode_fails_naming_the_option_where_no_plans_exist(spark: SparkSession, tmp_path: Path) -> None:
    from conformance.runner import start_reference_server

    with start_reference_server(tmp_path / "ref", 0) as ref:
        url = f"{ref.url}/v1/stream/ref"
        http = session()
        fill(http, url, "application/json", PAYLOADS["application/json"][:5])
        with pytest.raises(Exception, match="historyReads"):
            read_rows(spark, url=url, historyReads="delta")
        assert spark.read.format("durable_streams").option("url", url).load().count() == 5  # auto: over HTTP


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_retention_moving_past_a_plan_is_data_loss_as_over_http(
    server_factory: Callable[..., ServerProcess], fail_on_data_loss: str
) -> None:
    """A snapshot moves retention past a planned range, compaction purges and vacuums its files:
    the task's re-plan answers 410, which follows failOnDataLoss exactly as an HTTP read does."""
    from pyspark_durable_streams._source.direct_reads import DataLossError
    from pyspark_durable_streams._source.task_reader import StreamRange, read_range

    server = server_factory(*FAST, "--compaction-interval-s", "1", "--vacuum-retention-hours", "0")
    http = session()
    url = server.stream_url("purged")
    fill(http, url, "application/json", PAYLOADS["application/json"], per_request=3)
    wait_for(lambda: flushed(url, 40))
    options = parse_read_options({"url": url, "failOnDataLoss": fail_on_data_loss})
    schema = infer_schema(options)
    with connect(options.connection, url) as client:
        partitions, _ = plan_stream(client, url, url, offset_at(0), offset_at(30), 1000)
    (part,) = partitions
    snapshot = http.put(f"{url}/snapshot/{offset_at(20)}", headers={"Content-Type": "application/json"}, data=b"{}")
    assert snapshot.status_code == 204
    planned = {file.url for file in part.files}
    wait_for(lambda: _gone(http, planned), timeout_s=60)
    if fail_on_data_loss == "true":
        with pytest.raises(DataLossError, match="failOnDataLoss=false"):
            list(read_direct(options, schema, part))
        return
    direct = [row for batch in read_direct(options, schema, part) for row in batch.to_pylist()]
    over_http = [
        row
        for batch in read_range(options, schema, StreamRange(url, url, offset_at(0), offset_at(30), "arrow"))
        for row in batch.to_pylist()
    ]
    assert direct == over_http
    assert [row["offset"] for row in direct] == [offset_at(i) for i in range(20, 30)]


def test_spark_reads_while_compaction_rewrites_and_vacuums(
    spark: SparkSession, server_factory: Callable[..., ServerProcess]
) -> None:
    """Compaction passes every second (vacuum retention 0) while appends go on and Spark reads a
    fixed range again and again: every read yields the same rows as HTTP."""
    import threading

    server = server_factory(*FAST, "--compaction-interval-s", "1", "--vacuum-retention-hours", "0")
    http = session()
    url = server.stream_url("busy")
    fill(http, url, "application/json", PAYLOADS["application/json"], per_request=2)
    wait_for(lambda: flushed(url, 40))
    stop = threading.Event()

    def append() -> None:
        writer = session()
        while not stop.is_set():
            writer.post(url, headers={"Content-Type": "application/json"}, data=b'[{"later":1}]')
            time.sleep(0.02)  # (the appender's pace: time is the workload)

    thread = threading.Thread(target=append, daemon=True)
    thread.start()
    try:
        ending = json.dumps({url: offset_at(40)})
        expected = read_rows(spark, url=url, historyReads="http", endingOffsets=ending)
        for local in ("true", "false"):
            options = {"historyReads": "delta", "localFiles": local, "messagesPerPartition": "5"}
            assert read_rows(spark, url=url, endingOffsets=ending, **options) == expected
    finally:
        stop.set()
        thread.join()
    assert len(expected) == 40
