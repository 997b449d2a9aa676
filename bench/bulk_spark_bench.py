"""Bulk appends, Spark side: exactly-once streaming writes at Arrow speed.

One ``local[2]`` SparkSession (as ``spark_bench.py``) and our server with its defaults (WAL
durability, local Delta storage). The query is the ``write`` group's of ``spark_bench.py``: a
checkpointed ``Trigger.AvailableNow`` streaming query reading Parquet files of N 100-byte
``value`` rows, written into

* a JSON stream and an octet-stream stream with the ``durable_streams`` sink (exactly-once:
  idempotent producer triples; bulk appends, since our server offers them), and
* a Python ``DataSource`` stream writer that discards its Arrow batches (defined here): the
  ceiling of any Python sink, measured in the same run.

The stream's message count is checked after each write. Throughputs are the best of
``--repeat`` runs after one warm-up run each.

    python bench/bulk_spark_bench.py [--rows 1000000] [--repeat 1] [--write-option KEY=VALUE]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path += [str(REPO / "bench"), str(REPO / "tests")]

from benchkit import Result, at_least, progress, report  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import datasource as ds  # noqa: E402
from servers import ServerProcess  # noqa: E402
from spark_bench import FULL_ROWS, WARM_ROWS, Bench, parse_args, spark_session  # noqa: E402
from spark_kit import best_rate, connection, message_count, send  # noqa: E402

_ArrowStreamWriter: Any = getattr(ds, "DataSourceStreamArrowWriter", ds.DataSourceStreamWriter)
CONTENT_TYPES = ("application/json", "application/octet-stream")


class DiscardWriter(_ArrowStreamWriter):  # type: ignore[misc]
    """Takes every Arrow batch of its task and drops it."""

    def write(self, iterator: Iterator[Any]) -> ds.WriterCommitMessage:
        rows = 0
        for batch in iterator:
            rows += batch.num_rows if hasattr(batch, "num_rows") else 1
        return ds.WriterCommitMessage()

    def commit(self, messages: list[Any], batchId: int) -> None:
        pass

    def abort(self, messages: list[Any], batchId: int) -> None:
        pass


class DiscardSource(ds.DataSource):
    """``writeStream.format("bench_discard")``."""

    @classmethod
    def name(cls) -> str:
        return "bench_discard"

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        return DiscardWriter()


def create_stream(base: str, content_type: str) -> str:
    url = f"{base}/v1/stream/bulk-write-{uuid.uuid4().hex[:8]}"
    conn, path = connection(url)
    send(conn, "PUT", path, b"", content_type)
    conn.close()
    return url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=FULL_ROWS)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--write-option", action="append", default=[], metavar="KEY=VALUE")
    mine = parser.parse_args()
    sys.argv = [sys.argv[0], "--only", "write", "--rows", str(mine.rows), "--repeat", str(mine.repeat)]
    for option in mine.write_option:
        sys.argv += ["--write-option", option]
    args = parse_args()
    work = Path(tempfile.mkdtemp(prefix="ds-bulk-spark-bench-"))
    results: list[Result] = []
    with contextlib.ExitStack() as running:
        ours = ServerProcess(work / "ours").start()
        running.callback(ours.kill)
        spark: SparkSession = spark_session(work)
        running.callback(spark.stop)
        spark.dataSource.register(DiscardSource)
        assert ours.proc is not None
        bench = Bench(spark, args, work, ours.url, ours.proc.pid)
        rows = args.rows
        progress(f"{rows:,} rows into Parquet input files")
        folder = bench.parquet_input("write-input", rows)
        warm = bench.parquet_input("write-warm", WARM_ROWS)

        def write_connector(source: Path, count: int, content_type: str) -> None:
            url = create_stream(ours.url, content_type)
            bench.write_stream(source, "durable_streams", {**bench.write_options, "url": url})
            stored = message_count(url)
            if stored != count:
                raise RuntimeError(f"the exactly-once write stored {stored} messages of {count}")

        progress("warm-up runs")
        bench.write_stream(warm, "bench_discard", {})
        for content_type in CONTENT_TYPES:
            write_connector(warm, WARM_ROWS, content_type)
        progress("Parquet → discarding Python DataSource writer")
        discard = best_rate("discard", rows, args.repeat, lambda: bench.write_stream(folder, "bench_discard", {}))
        for content_type in CONTENT_TYPES:
            progress(f"Parquet → durable_streams, {content_type} (exactly-once, checkpointed)")
            ours_rate = best_rate(
                content_type, rows, args.repeat, lambda ct=content_type: write_connector(folder, rows, ct)
            )
            metric = (
                f"exactly-once streaming write, {rows:,} rows of 100 B into a {content_type} stream, rows/s; "
                "baseline: same query into a discarding Python DataSource writer"
            )
            results.append(Result(metric, ours_rate, discard, at_least(0.6)))
    shutil.rmtree(work, ignore_errors=True)
    settings = {
        "rows": rows,
        "repeat": args.repeat,
        "write options": " ".join(args.write_option) or "defaults",
        "quick": rows < FULL_ROWS,
    }
    report(
        "bulk_spark" + ("-quick" if settings["quick"] else ""),
        None,
        "Bulk appends: Spark writes",
        "discarding writer",
        results,
        settings,
    )


if __name__ == "__main__":
    main()
