"""Spark benchmarks of the ``durable_streams`` source and sink, each beside a baseline, one run.

A ``local[2]`` SparkSession (settings from the repository's spark-defaults.conf when it
exists, else Arrow on and Python worker reuse; the reads' rounds in sessions of their own,
below) and our server with its defaults (WAL durability, local Delta storage), both on this
machine, over loopback. The connector runs with
its default options unless ``--read-option`` / ``--write-option`` say otherwise; the bench
sets nothing process-wide for one side of a comparison that it does not set for the other.
Three groups, runnable on their own (``--only``):

* ``read``: a batch read of N JSON messages of 100 bytes from our server into the ``noop``
  sink (all history in Delta first: with ``historyReads=auto`` the executors read the Parquet
  files, locally or with ``localFiles=false`` through the signed URLs, and again with
  ``historyReads=http``, the server's CPU time during each read taken from /proc), beside the
  same rows (the same ``stream`` key too) from an in-memory Python data source
  (``memory_source.py``: Arrow batches, every column built by Arrow, the ceiling of a plain
  Python source). The target row compares the two in the same Python workers (the baseline
  registered so that its tasks share the workers of ours: same imports, same collector, same
  anything a task leaves behind), as the median of the rounds; beside it the same source in
  workers of its own, and with the short ``stream`` value ``memory`` (narrower rows). These six
  reads run round after round (``--repeat`` rounds after an untimed one, each read once per
  round; the target row's two reads one after the other, trading places every other round, so
  that each follows the same reads as often), so the machine's load falls on all alike, in
  ``--read-sessions`` Spark sessions (3), each in a driver process of its own, their rounds
  pooled: a session (its JVM) can move the ratio, bench/README.md. Then
  Spark's built-in ``rate-micro-batch`` source (bounded: ``rowsPerBatch=N`` with
  ``Trigger.AvailableNow`` reads exactly one batch of N rows), and the same connector reading
  the reference Node server (where it falls back to one partition per stream).
* ``write``: an exactly-once streaming write (checkpointed, Trigger.AvailableNow) of N rows
  from Parquet files (a replayable source) into one JSON stream, beside the same query into
  the ``noop`` sink. The stream's message count is checked afterwards.
* ``latency``: a streaming query reading our stream with a short trigger into a
  ``foreachBatch`` that notes when each row arrives; each message carries its append time.
  Baseline: the floor, the same query over a source that does nothing but read the lines a
  local file gains (``floor_source.py``).

Every row says how its number was made (``from``: median or best of the runs); the JSON
record keeps every run's raw time. The machine has few cores shared by client, server and
Spark: read the ratios, not the absolute numbers.

    python bench/spark_bench.py [--quick] [--only read,write,latency] [--rows N] [--repeat K] [--read-sessions S]

A complete run at full size (1,000,000 rows, 5 rounds in each of 3 read sessions, 100 latency
messages) is a run of record:
``bench/results/spark.json``, rendered into bench/README.md by ``bench/render.py``; any other
run goes to ``bench/results/scratch/``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path += [str(REPO / "tests"), str(REPO / "tests" / "conformance"), str(REPO / "bench")]
SPARK_DEFAULTS = REPO / "spark-defaults.conf"

# Workers must run this virtualenv's Python (with this project installed).
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

import floor_source  # noqa: E402
import memory_source  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from benchkit import (  # noqa: E402
    Result,
    at_least,
    at_most,
    continue_clock,
    progress,
    report,
    run_clock,
    value_at_least,
)
from direct_reads import Timed, interleaved, pooled, wait_in_delta  # noqa: E402
from floor_source import FileLinesSource  # noqa: E402
from memory_source import ROWS_PER_PARTITION, InMemoryInOurWorkers, InMemorySource, json_values  # noqa: E402
from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import DataSource  # noqa: E402
from runner import start_reference_server  # noqa: E402
from servers import ServerProcess  # noqa: E402
from spark_kit import (  # noqa: E402
    cpu_row,
    create_json_stream,
    fill_json_stream,
    message_count,
    rate_row,
    run_available_now,
    timed_runs,
)
from spark_latency import latency  # noqa: E402
from worker_pools import register_in_pool  # noqa: E402

import pyspark_durable_streams  # noqa: E402

GROUPS = ("read", "write", "latency")
FALLBACK_SETTINGS = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "2g",
}
WARM_ROWS = 20_000
TARGET_READS = ("ours, direct", "in-memory, same rows, same workers")
"""The target row's two reads: next to each other in a round, trading places every other round."""
FULL_ROWS = 1_000_000  # the loads of record; smaller runs are recorded as quick ones
FULL_LATENCY_MESSAGES = 100
RECORD_REPEAT = 5  # rounds of a run of record (fewer: a quick run)
READ_SESSIONS = 3  # Spark sessions, a driver process each, the reads' rounds run in (a run of record)


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
        rows, repeat, sessions = self.args.rows, self.args.repeat, self.args.read_sessions
        progress(f"read: filling our server with {rows:,} messages")
        url = fill_json_stream(self.ours, "read", rows, "ours")
        warm = fill_json_stream(self.ours, "read-warm", WARM_ROWS, "ours (warm-up)")
        wait_in_delta(url)
        wait_in_delta(warm)
        timed = pooled([self.read_session(url, warm, session, sessions) for session in range(sessions)])
        ours, memory = timed[TARGET_READS[0]], timed[TARGET_READS[1]]
        progress("read: rate-micro-batch → noop")
        self.read_rate(rows)  # (untimed, at full size as every read's first run: this session read nothing yet)
        rate = timed_runs("rate-micro-batch", rows, repeat, lambda: self.read_rate(rows))
        metric = f"batch read, {rows:,} JSON msgs → noop, rows/s"
        baseline = "in-memory Python source (Arrow columns) in the same Python workers"
        results = [
            rate_row(f"{metric}; baseline: {baseline}", rows, ours, memory, target=at_least(1.0)),
            rate_row(f"{metric}, fastest runs; baseline: {baseline}", rows, ours, memory, best=True),
            rate_row(
                f"{metric}; baseline: the same source in Python workers of its own",
                rows,
                ours,
                timed["in-memory, same rows, workers of its own"],
            ),
            rate_row(
                f"{metric}; baseline: {baseline}, stream column 'memory'",
                rows,
                ours,
                timed["in-memory, stream 'memory', same workers"],
            ),
            rate_row(f"{metric}, historyReads=http; baseline: {baseline}", rows, timed["ours, http"], memory),
            rate_row(f"{metric}, localFiles=false; baseline: {baseline}", rows, timed["ours, direct via URLs"], memory),
            cpu_row(
                "server CPU s during the read: direct; baseline: historyReads=http",
                ours,
                timed["ours, http"],
                target=at_most(0.1),
            ),
            cpu_row(
                "server CPU s during the read: direct via signed URLs; baseline: historyReads=http",
                timed["ours, direct via URLs"],
                timed["ours, http"],
            ),
            rate_row(f"{metric}, fastest runs; baseline: built-in rate-micro-batch", rows, ours, rate, best=True),
        ]
        if reference is not None:
            progress(f"read: filling the reference server with {rows:,} messages")
            ref_url = fill_json_stream(reference, "read", rows, "reference")
            ref_warm = fill_json_stream(reference, "read-warm", WARM_ROWS, "reference (warm-up)")
            self.read_connector(ref_warm)
            progress("read: reference server → noop")
            ref = timed_runs("reference", rows, repeat, lambda: self.read_connector(ref_url))
            results.append(
                rate_row(
                    f"{metric}, fastest runs; baseline: same read from the reference server", rows, ours, ref, True
                )
            )
        return results

    def read_session(self, url: str, warm: str, session: int, sessions: int) -> dict[str, Timed]:
        """One Spark session's warm-up and rounds of the six reads (``read_rounds``), run by a driver
        process of its own: a JVM of its own (a session can move the target row's ratio, bench/README.md)."""
        progress(f"read: Spark session {session + 1} of {sessions}, a driver process of its own")
        out = self.fresh_dir(f"read-session-{session + 1}") / "timed.json"
        spec = {
            "ours": self.ours,
            "pid": self.pid,
            "url": url,
            "warm": warm,
            "rows": self.args.rows,
            "repeat": self.args.repeat,
            "first_round": session * self.args.repeat,
            "read_option": self.args.read_option,
            "out": str(out),
            "clock": run_clock(),
        }
        subprocess.run([sys.executable, __file__, "--read-session", json.dumps(spec)], check=True)
        return {label: Timed(**runs) for label, runs in json.loads(out.read_text()).items()}

    def read_rounds(self, url: str, warm: str, first_round: int = 0) -> dict[str, Timed]:
        """This session's warm-up, then ``repeat`` rounds of the six reads (``interleaved``; the
        sessions' rounds are counted on from one session to the next: ``first_round``)."""
        rows, repeat = self.args.rows, self.args.repeat
        progress("read: warm-up runs")
        counted = self.spark.read.format("durable_streams").options(**self.read_options).option("url", warm).load()
        if counted.count() != WARM_ROWS:
            raise RuntimeError(f"the connector read {counted.count()} rows of {WARM_ROWS}")
        self.read_memory(WARM_ROWS)
        self.read_memory(WARM_ROWS, source=InMemoryInOurWorkers)
        self.read_connector(warm, "http")
        progress("read: our server (direct, direct via URLs, http) and the in-memory sources, round after round")
        return interleaved(
            {
                "in-memory, same rows, workers of its own": lambda: self.read_memory(rows, url),
                TARGET_READS[0]: lambda: self.read_connector(url, "auto"),
                TARGET_READS[1]: lambda: self.read_memory(rows, url, InMemoryInOurWorkers),
                "ours, direct via URLs": lambda: self.read_connector(url, "auto", localFiles="false"),
                "ours, http": lambda: self.read_connector(url, "http"),
                "in-memory, stream 'memory', same workers": lambda: self.read_memory(
                    rows, "memory", InMemoryInOurWorkers
                ),
            },
            rows,
            repeat,
            self.pid,
            pair=TARGET_READS,
            first_round=first_round,
        )

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
        ours = timed_runs("ours", rows, repeat, lambda: self.write_connector(folder, rows))
        progress("write: Parquet → noop")
        noop = timed_runs("noop", rows, repeat, lambda: self.write_stream(folder, "noop", {}))
        metric = f"exactly-once streaming write, {rows:,} rows, rows/s, fastest runs; baseline: same query into noop"
        return [rate_row(metric, rows, ours, noop, best=True, target=value_at_least(250_000))]

    def latency(self) -> list[Result]:
        args = self.args
        return latency(
            self.spark,
            self.ours,
            self.read_options,
            self.fresh_dir("latency"),
            args.trigger_ms,
            args.latency_messages,
            args.latency_interval_ms,
        )


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
    for module in (memory_source, floor_source):  # (workers lack bench/)
        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    register_in_pool(spark, "in-memory", InMemorySource)
    spark.dataSource.register(InMemoryInOurWorkers)
    spark.dataSource.register(FileLinesSource)
    return spark


def run_read_session(spec_json: str) -> None:
    """A ``--read-session`` driver process (``Bench.read_session`` starts it): a SparkSession of its own,
    ``Bench.read_rounds``, every run written to the spec's ``out`` as JSON."""
    spec = json.loads(spec_json)
    continue_clock(spec["clock"])
    out = Path(spec["out"])
    args = argparse.Namespace(
        rows=spec["rows"], repeat=spec["repeat"], read_option=spec["read_option"], write_option=[]
    )
    spark = spark_session(out.parent)
    try:
        bench = Bench(spark, args, out.parent, spec["ours"], spec["pid"])
        timed = bench.read_rounds(spec["url"], spec["warm"], spec["first_round"])
    finally:
        spark.stop()
    out.write_text(json.dumps({label: dataclasses.asdict(runs) for label, runs in timed.items()}))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 100,000 rows, 20 latency messages")
    parser.add_argument("--only", default=",".join(GROUPS), help="comma-separated groups: read,write,latency")
    parser.add_argument("--rows", type=int, help="rows read and written (default 1,000,000; 100,000 with --quick)")
    parser.add_argument(
        "--repeat", type=int, help=f"timed rounds per measurement (default {RECORD_REPEAT}; 2 with --quick)"
    )
    parser.add_argument(
        "--read-sessions",
        type=int,
        help=f"Spark sessions (driver processes) the reads' rounds run in (default {READ_SESSIONS}; 1 with --quick)",
    )
    parser.add_argument("--read-session", help=argparse.SUPPRESS)  # (a session's own process: run_read_session)
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
    args.repeat = args.repeat or (2 if args.quick else RECORD_REPEAT)
    args.read_sessions = args.read_sessions or (1 if args.quick else READ_SESSIONS)
    if args.repeat < 1 or args.rows < 1 or args.read_sessions < 1:
        parser.error("--repeat, --rows and --read-sessions must be at least 1")
    args.latency_messages = args.latency_messages or (20 if args.quick else FULL_LATENCY_MESSAGES)
    for option in args.read_option + args.write_option:
        if "=" not in option:
            parser.error(f"options are KEY=VALUE, got {option!r}")
    return args


def main() -> None:
    args = parse_args()
    if args.read_session:
        run_read_session(args.read_session)
        return
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
    settings = {
        "rows": args.rows,
        "repeat": args.repeat,
        "read sessions": args.read_sessions,
        "groups": "+".join(args.groups),
        "spark settings": SPARK_DEFAULTS.name if SPARK_DEFAULTS.exists() else "built-in fallback",
        "read options": " ".join(args.read_option) or "the connector's defaults (freezeWorkerGc off)",
        "write options": " ".join(args.write_option) or "the connector's defaults",
        "quick": args.quick
        or args.rows < FULL_ROWS
        or args.repeat < RECORD_REPEAT
        or args.read_sessions < READ_SESSIONS
        or args.latency_messages < FULL_LATENCY_MESSAGES,
    }
    complete = set(args.groups) == set(GROUPS)
    stem = "spark" + ("" if complete else "-" + "-".join(args.groups)) + ("-quick" if settings["quick"] else "")
    report(stem, "spark" if complete else None, "Spark benchmarks", "baseline", results, settings, work_dir=work)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
