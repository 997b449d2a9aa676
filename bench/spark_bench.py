"""Spark benchmarks of the ``durable_streams`` source and sink, each beside a baseline, one run.

One ``local[2]`` SparkSession (settings from the repository's spark-defaults.conf when it
exists, else Arrow on and Python worker reuse) and our server with its defaults (WAL
durability, local Delta storage). Three groups, runnable on their own (``--only``):

* ``read``: a batch read of N JSON messages of 100 bytes from our server into the ``noop``
  sink (all history in Delta first: with ``historyReads=auto`` the executors read the Parquet
  files, locally or with ``localFiles=false`` through the signed URLs, and again with
  ``historyReads=http``, the server's CPU time during each read taken from /proc), beside the
  same rows (the same ``stream`` key too) from an in-memory Python data source (defined here,
  yielding Arrow RecordBatches: the ceiling of a plain Python source; its tasks run in Python
  workers of their own, as any source's do when nothing else runs in them), that source with
  the short ``stream`` value ``memory`` it had before (narrower rows), and that source in the
  workers that run ours (whose imports our source froze out of PySpark's collection after each
  task, so this compares the reads' own work); these six reads run round after round
  (``--repeat`` rounds, each read once per round, each round starting one read
  later), so the machine's load falls on all alike. Then Spark's built-in ``rate-micro-batch``
  source (the bounded rate source: ``rate`` cannot be bounded, with ``Trigger.AvailableNow``
  it reads 0 rows; ``rate-micro-batch`` with ``rowsPerBatch=N`` and AvailableNow reads exactly
  one batch of N rows), and the same connector reading the reference Node server (where it
  falls back to one partition per stream: no sequence offsets, no multipart reads).
* ``write``: an exactly-once streaming write (checkpointed, Trigger.AvailableNow) of N rows
  from Parquet files (a replayable source) into one JSON stream, beside the same query into
  the ``noop`` sink. The stream's message count is checked afterwards.
* ``latency``: a streaming query reading our stream with a short trigger into a
  ``foreachBatch`` that notes when each row arrives; each message carries its append time.

Throughputs are the best of ``--repeat`` runs after one warm-up run each (JVM, codegen and
Python workers warm). The machine has few cores shared by client, server and Spark: read the
ratios, not the absolute numbers.

    python bench/spark_bench.py [--quick] [--only read,write,latency] [--rows N] [--repeat K]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shlex
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
sys.path += [str(REPO / "tests"), str(REPO / "tests" / "conformance"), str(REPO / "bench")]
SPARK_DEFAULTS = REPO / "spark-defaults.conf"

# Workers must run this virtualenv's Python (with this project installed).
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from benchkit import (  # noqa: E402
    Result,
    at_least,
    at_most,
    percentile,
    progress,
    report,
    value_at_least,
    value_at_most,
)
from direct_reads import interleaved, wait_in_delta  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402
from pyspark.sql.streaming.query import StreamingQuery  # noqa: E402
from runner import start_reference_server  # noqa: E402
from servers import ServerProcess  # noqa: E402
from worker_pools import register_in_pool  # noqa: E402

import pyspark_durable_streams  # noqa: E402

GROUPS = ("read", "write", "latency")
FALLBACK_SETTINGS = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "2g",
}
READ_SCHEMA = "stream string, offset string, value string, content_type string, timestamp timestamp"
ROWS_PER_PARTITION = 100_000  # as the connector's default messagesPerPartition
ROWS_PER_BATCH = 10_000
FILL_MESSAGES_PER_POST = 10_000
WARM_ROWS = 20_000
FULL_ROWS = 1_000_000  # the loads; smaller runs are recorded as quick ones
FULL_LATENCY_MESSAGES = 100

# A message is 100 bytes of JSON: {"id":"0000000042","kind":"bench","pad":"xxx…"}.
_PREFIX, _MIDDLE = '{"id":"', '","kind":"bench","pad":"'
_PAD = "x" * (100 - len(_PREFIX) - 10 - len(_MIDDLE) - 2)
_SUFFIX = _MIDDLE + _PAD + '"}'


def json_values(first: int, count: int) -> pa.Array:
    """Messages ``first … first+count-1`` without a Python object per row (the source's ceiling)."""
    ids = pc.utf8_lpad(pc.cast(pa.array(np.arange(first, first + count)), pa.string()), 10, "0")
    return pc.binary_join_element_wise(_PREFIX, ids, _SUFFIX, "")


# -- the in-memory Python data source (the baseline of the read) -----------------------------


class RowRange(InputPartition):
    def __init__(self, first: int, end: int) -> None:
        self.first, self.end = first, end


class InMemoryReader(DataSourceReader):
    """The rows our source yields for a JSON stream (same schema, same values), made in memory."""

    def __init__(self, rows: int, stream: str) -> None:
        self.rows, self.stream = rows, stream

    def partitions(self) -> Sequence[InputPartition]:
        return [RowRange(i, min(i + ROWS_PER_PARTITION, self.rows)) for i in range(0, self.rows, ROWS_PER_PARTITION)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RowRange)
        now_us = int(time.time() * 1_000_000)
        for first in range(partition.first, partition.end, ROWS_PER_BATCH):
            count = min(ROWS_PER_BATCH, partition.end - first)
            seqs = pc.utf8_lpad(pc.cast(pa.array(np.arange(first, first + count)), pa.string()), 16, "0")
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([self.stream] * count, pa.string()),
                    pc.binary_join_element_wise(seqs, "_0000000000000000", ""),
                    json_values(first, count),
                    pa.array(["application/json"] * count, pa.string()),
                    pa.array(np.full(count, now_us), pa.timestamp("us", tz="UTC")),
                ],
                names=["stream", "offset", "value", "content_type", "timestamp"],
            )


class InMemorySource(DataSource):
    """``spark.read.format("bench_in_memory").option("rows", N)``: registered so that its tasks
    run in Python workers of their own (``worker_pools.register_in_pool``), as a source's tasks do when
    nothing else runs in their workers."""

    @classmethod
    def name(cls) -> str:
        return "bench_in_memory"

    def schema(self) -> str:
        return READ_SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return InMemoryReader(int(self.options["rows"]), self.options.get("stream", "memory"))


class InMemoryInOurWorkers(InMemorySource):
    """The same source, its tasks in the Python workers that run ours: the collection PySpark runs
    after each task is cheap there too once our source has frozen the workers' imports
    (``pyspark_durable_streams/_worker_gc.py``), so this measures the reads' own work alike."""

    @classmethod
    def name(cls) -> str:
        return "bench_in_memory_our_workers"


# -- servers and streams ---------------------------------------------------------------------


def _send(conn: http.client.HTTPConnection, method: str, path: str, body: bytes, content_type: str) -> None:
    conn.request(method, path, body=body, headers={"Content-Type": content_type})
    response = conn.getresponse()
    response.read()
    if response.status not in (200, 201, 204):
        raise RuntimeError(f"{method} {path}: HTTP {response.status}")


def _connection(url: str) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=120), parts.path


def create_json_stream(base: str, name: str) -> str:
    url = f"{base}/v1/stream/{name}-{uuid.uuid4().hex[:8]}"
    conn, path = _connection(url)
    _send(conn, "PUT", path, b"", "application/json")
    conn.close()
    return url


def fill_json_stream(base: str, name: str, rows: int, label: str) -> str:
    """A new JSON stream holding messages 0 … rows-1, appended as large JSON-array POSTs."""
    url = create_json_stream(base, name)
    conn, path = _connection(url)
    started, step = time.perf_counter(), max(1, rows // 5)
    for first in range(0, rows, FILL_MESSAGES_PER_POST):
        count = min(FILL_MESSAGES_PER_POST, rows - first)
        body = "[" + ",".join(json_values(first, count).to_pylist()) + "]"
        _send(conn, "POST", path, body.encode(), "application/json")
        if (first + count) // step != first // step and first + count < rows:
            progress(f"  filling {label}: {first + count:,}/{rows:,} messages")
    conn.close()
    progress(f"  filled {label} with {rows:,} messages in {time.perf_counter() - started:.1f}s")
    return url


def message_count(url: str) -> int:
    """Our server's tail offset starts with the stream's message count."""
    conn, path = _connection(url)
    conn.request("HEAD", path)
    response = conn.getresponse()
    response.read()
    conn.close()
    return int(response.getheader("Stream-Next-Offset", "0_").split("_")[0])


# -- measuring -------------------------------------------------------------------------------


def best_rate(label: str, rows: int, repeat: int, run: Callable[[], None]) -> float:
    """Rows per second of the fastest of ``repeat`` runs."""
    rates = []
    for attempt in range(repeat):
        started = time.perf_counter()
        run()
        elapsed = time.perf_counter() - started
        rates.append(rows / elapsed)
        progress(f"  {label}: {rows:,} rows in {elapsed:.2f}s = {rates[-1]:,.0f} rows/s (run {attempt + 1}/{repeat})")
    return max(rates)


def run_available_now(frame: DataFrame, sink: str, checkpoint: Path, options: dict[str, str]) -> StreamingQuery:
    query = (
        frame.writeStream.format(sink)
        .options(**options)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    exception = query.exception()
    if exception is not None:
        raise RuntimeError(f"the {sink} query failed: {exception}")
    return query


class Bench:
    def __init__(self, spark: SparkSession, args: argparse.Namespace, work: Path, ours: str, pid: int) -> None:
        self.spark, self.args, self.work, self.ours, self.pid = spark, args, work, ours, pid
        self.read_options = dict(option.split("=", 1) for option in args.read_option)
        self.write_options = dict(option.split("=", 1) for option in args.write_option)

    def fresh_dir(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.work))

    # -- read ------------------------------------------------------------------------------

    def read_connector(self, url: str, history_reads: str | None = None, **extra: str) -> None:
        options = {**self.read_options, **({"historyReads": history_reads} if history_reads else {}), **extra}
        self.spark.read.format("durable_streams").options(**options).option("url", url).load().write.format(
            "noop"
        ).mode("overwrite").save()

    def read_memory(self, rows: int, stream: str = "memory", source: type[DataSource] = InMemorySource) -> None:
        self.spark.read.format(source.name()).option("rows", rows).option("stream", stream).load().write.format(
            "noop"
        ).mode("overwrite").save()

    def read_rate(self, rows: int) -> None:
        source = (
            self.spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", rows)
            .option("numPartitions", self.spark.sparkContext.defaultParallelism)
            .load()
        )
        query = run_available_now(source, "noop", self.fresh_dir("rate-checkpoint"), {})
        read = sum(p["numInputRows"] for p in query.recentProgress)
        if read != rows:
            raise RuntimeError(f"rate-micro-batch read {read} rows, not {rows}")

    def read(self, reference: str | None) -> list[Result]:
        rows, repeat = self.args.rows, self.args.repeat
        progress(f"read: filling our server with {rows:,} messages")
        url = fill_json_stream(self.ours, "read", rows, "ours")
        warm = fill_json_stream(self.ours, "read-warm", WARM_ROWS, "ours (warm-up)")
        progress("read: warm-up runs")
        counted = self.spark.read.format("durable_streams").options(**self.read_options).option("url", warm).load()
        if counted.count() != WARM_ROWS:
            raise RuntimeError(f"the connector read {counted.count()} rows of {WARM_ROWS}")
        self.read_memory(WARM_ROWS)
        self.read_memory(WARM_ROWS, source=InMemoryInOurWorkers)
        self.read_rate(WARM_ROWS)
        wait_in_delta(url)
        wait_in_delta(warm)
        self.read_connector(warm, "http")
        progress("read: our server (direct, direct via URLs, http) and the in-memory sources, round after round")
        timed = interleaved(
            {
                "ours, direct": lambda: self.read_connector(url, "auto"),
                "in-memory, same rows": lambda: self.read_memory(rows, url),
                "ours, direct via URLs": lambda: self.read_connector(url, "auto", localFiles="false"),
                "ours, http": lambda: self.read_connector(url, "http"),
                "in-memory, stream 'memory'": lambda: self.read_memory(rows),
                "in-memory, same rows, our workers": lambda: self.read_memory(rows, url, InMemoryInOurWorkers),
            },
            rows,
            repeat,
            self.pid,
        )
        ours, memory = timed["ours, direct"].best_rate(rows), timed["in-memory, same rows"].best_rate(rows)
        over_http, via_urls = timed["ours, http"].best_rate(rows), timed["ours, direct via URLs"].best_rate(rows)
        narrow = timed["in-memory, stream 'memory'"].best_rate(rows)
        shared = timed["in-memory, same rows, our workers"]
        direct_cpu, http_cpu = timed["ours, direct"].cpu_of_best(), timed["ours, http"].cpu_of_best()
        urls_cpu = timed["ours, direct via URLs"].cpu_of_best()
        progress("read: rate-micro-batch → noop")
        rate = best_rate("rate-micro-batch", rows, repeat, lambda: self.read_rate(rows))
        metric = f"batch read, {rows:,} JSON msgs → noop, rows/s"
        results = [
            Result(f"{metric}; baseline: in-memory Python source", ours, memory, at_least(1.0)),
            Result(
                f"{metric}, medians of the runs; baseline: in-memory Python source",
                rows / timed["ours, direct"].median_s(),
                rows / timed["in-memory, same rows"].median_s(),
            ),
            Result(f"{metric}, historyReads=http; baseline: in-memory Python source", over_http, memory),
            Result(
                "server CPU s during that read: direct; baseline: historyReads=http", direct_cpu, http_cpu, at_most(0.1)
            ),
            Result(f"{metric}, localFiles=false; baseline: in-memory Python source", via_urls, memory),
            Result(
                "server CPU s during that read: direct via signed URLs; baseline: historyReads=http", urls_cpu, http_cpu
            ),
            Result(f"{metric}; baseline: in-memory Python source, stream column 'memory'", ours, narrow),
            Result(
                f"{metric}; baseline: in-memory Python source in our (frozen) workers", ours, shared.best_rate(rows)
            ),
            Result(
                f"{metric}, medians of the runs; baseline: in-memory Python source in our (frozen) workers",
                rows / timed["ours, direct"].median_s(),
                rows / shared.median_s(),
            ),
            Result(f"{metric}; baseline: built-in rate-micro-batch", ours, rate),
        ]
        if reference is not None:
            progress(f"read: filling the reference server with {rows:,} messages")
            ref_url = fill_json_stream(reference, "read", rows, "reference")
            ref_warm = fill_json_stream(reference, "read-warm", WARM_ROWS, "reference (warm-up)")
            self.read_connector(ref_warm)
            progress("read: reference server → noop")
            ref = best_rate("reference", rows, repeat, lambda: self.read_connector(ref_url))
            results.append(Result(f"{metric}; baseline: same read from the reference server", ours, ref))
        return results

    # -- write -----------------------------------------------------------------------------

    def parquet_input(self, name: str, rows: int) -> Path:
        """Parquet files holding a ``value`` column of the messages (several files: several tasks)."""
        folder = self.fresh_dir(name)
        for index, first in enumerate(range(0, rows, ROWS_PER_PARTITION)):
            values = json_values(first, min(ROWS_PER_PARTITION, rows - first))
            pq.write_table(pa.table({"value": values}), folder / f"part-{index:05d}.parquet")
        return folder

    def write_stream(self, folder: Path, sink: str, options: dict[str, str]) -> None:
        source = self.spark.readStream.schema("value string").parquet(str(folder))
        run_available_now(source, sink, self.fresh_dir("write-checkpoint"), options)

    def write_connector(self, folder: Path, rows: int) -> None:
        url = create_json_stream(self.ours, "write")
        self.write_stream(folder, "durable_streams", {**self.write_options, "url": url})
        stored = message_count(url)
        if stored != rows:
            raise RuntimeError(f"the exactly-once write stored {stored} messages of {rows}")

    def write(self) -> list[Result]:
        rows, repeat = self.args.rows, self.args.repeat
        progress(f"write: {rows:,} rows into Parquet input files")
        folder = self.parquet_input("write-input", rows)
        warm = self.parquet_input("write-warm", WARM_ROWS)
        progress("write: warm-up runs")
        self.write_connector(warm, WARM_ROWS)
        self.write_stream(warm, "noop", {})
        progress("write: Parquet → durable_streams (exactly-once, checkpointed)")
        ours = best_rate("ours", rows, repeat, lambda: self.write_connector(folder, rows))
        progress("write: Parquet → noop")
        noop = best_rate("noop", rows, repeat, lambda: self.write_stream(folder, "noop", {}))
        metric = f"exactly-once streaming write, {rows:,} rows, rows/s; baseline: same query into noop"
        return [Result(metric, ours, noop, value_at_least(250_000))]

    # -- latency ---------------------------------------------------------------------------

    def latency(self) -> list[Result]:
        """Append → row visible in foreachBatch, for messages appended one by one at a steady pace."""
        url = create_json_stream(self.ours, "latency")
        arrived: dict[str, float] = {}
        lock = threading.Lock()

        def sink(frame: DataFrame, batch_id: int) -> None:
            values = [row.value for row in frame.select("value").collect()]
            now = time.time()
            with lock:
                for value in values:
                    message = json.loads(value)
                    arrived[message["id"]] = now - message["t"]

        query = (
            self.spark.readStream.format("durable_streams")
            .options(**self.read_options)
            .option("url", url)
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(self.fresh_dir("latency-checkpoint")))
            .trigger(processingTime=f"{self.args.trigger_ms} milliseconds")
            .start()
        )
        conn, path = _connection(url)

        def append(ident: str) -> None:
            body = json.dumps({"id": ident, "t": time.time(), "pad": "x" * 50}, separators=(",", ":"))
            _send(conn, "POST", path, body.encode(), "application/json")

        def wait_for(idents: list[str], timeout_s: float) -> None:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and query.isActive:
                with lock:
                    if all(ident in arrived for ident in idents):
                        return
                time.sleep(0.01)
            raise RuntimeError(f"rows did not arrive in the sink within {timeout_s}s: {query.exception()}")

        try:
            progress("latency: warm-up (the query's first batches)")
            for index in range(3):
                append(f"warm-{index}")
                wait_for([f"warm-{index}"], 120)
            count, interval = self.args.latency_messages, self.args.latency_interval_ms / 1000
            progress(f"latency: {count} messages, one every {interval * 1000:.0f} ms")
            idents = [f"m-{index}" for index in range(count)]
            for ident in idents:
                append(ident)
                time.sleep(interval)
            wait_for(idents, 60)
        finally:
            query.stop()
            conn.close()
        latencies = [1000 * arrived[ident] for ident in idents]
        metric = f"append → visible in foreachBatch (trigger {self.args.trigger_ms} ms), {count} msgs"
        return [
            Result(f"{metric}: p50 ms", percentile(latencies, 0.5), None, value_at_most(300)),
            Result(f"{metric}: p99 ms", percentile(latencies, 0.99)),
        ]


def spark_session(work: Path) -> SparkSession:
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("durable-streams-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
    )
    if SPARK_DEFAULTS.exists():  # Spark's own parser, exactly as spark-submit reads the file
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--properties-file {shlex.quote(str(SPARK_DEFAULTS))} pyspark-shell"
    else:
        for key, value in FALLBACK_SETTINGS.items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pyspark_durable_streams.register(spark)
    register_in_pool(spark, "in-memory", InMemorySource)
    spark.dataSource.register(InMemoryInOurWorkers)
    return spark


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 100,000 rows, 20 latency messages")
    parser.add_argument("--only", default=",".join(GROUPS), help="comma-separated groups: read,write,latency")
    parser.add_argument("--rows", type=int, help="rows read and written (default 1,000,000; 100,000 with --quick)")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per measurement; the best counts")
    parser.add_argument("--no-reference", action="store_true", help="skip the read from the reference server")
    parser.add_argument("--trigger-ms", type=int, default=100, help="processing-time trigger of the latency query")
    parser.add_argument("--latency-messages", type=int, help="messages timed (default 100; 20 with --quick)")
    parser.add_argument("--latency-interval-ms", type=int, default=100, help="pause between latency appends")
    parser.add_argument("--read-option", action="append", default=[], metavar="KEY=VALUE", help="read/latency")
    parser.add_argument("--write-option", action="append", default=[], metavar="KEY=VALUE", help="sink option")
    args = parser.parse_args()
    args.groups = [group.strip() for group in args.only.split(",") if group.strip()]
    unknown = sorted(set(args.groups) - set(GROUPS))
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}: choose from {', '.join(GROUPS)}")
    args.rows = args.rows or (100_000 if args.quick else FULL_ROWS)
    args.latency_messages = args.latency_messages or (20 if args.quick else FULL_LATENCY_MESSAGES)
    for option in args.read_option + args.write_option:
        if "=" not in option:
            parser.error(f"options are KEY=VALUE, got {option!r}")
    return args


def main() -> None:
    args = parse_args()
    work = Path(tempfile.mkdtemp(prefix="ds-spark-bench-"))
    progress(f"starting our server and Spark (work dir {work}; kept if the run fails)")
    results: list[Result] = []
    with contextlib.ExitStack() as running:
        ours = ServerProcess(work / "ours").start()
        running.callback(ours.kill)
        reference = None
        if "read" in args.groups and not args.no_reference:
            reference = start_reference_server(work / "reference", long_poll_timeout_ms=30_000)
            running.callback(reference.stop)
        spark = spark_session(work)
        running.callback(spark.stop)
        assert ours.proc is not None
        bench = Bench(spark, args, work, ours.url, ours.proc.pid)
        if "read" in args.groups:
            results += bench.read(reference.url if reference is not None else None)
        if "write" in args.groups:
            results += bench.write()
        if "latency" in args.groups:
            results += bench.latency()
    shutil.rmtree(work, ignore_errors=True)
    settings = {
        "rows": args.rows,
        "repeat": args.repeat,
        "groups": "+".join(args.groups),
        "spark settings": SPARK_DEFAULTS.name if SPARK_DEFAULTS.exists() else "built-in fallback",
        "read options": " ".join(args.read_option) or "defaults",
        "write options": " ".join(args.write_option) or "defaults",
        "quick": args.quick or args.rows < FULL_ROWS or args.latency_messages < FULL_LATENCY_MESSAGES,
    }
    complete = set(args.groups) == set(GROUPS)
    stem = "spark" + ("" if complete else "-" + "-".join(args.groups)) + ("-quick" if settings["quick"] else "")
    report(stem, "spark" if complete else None, "Spark benchmarks", "baseline", results, settings)


if __name__ == "__main__":
    main()
