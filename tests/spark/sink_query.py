"""A streaming query from JSON files to a Durable Stream, run as its own process by the sink tests.

It is its own process so that tests can SIGKILL it mid-batch and run it again from the same
checkpoint, and so that it can use a master that retries failed tasks (``local[2,3]``), which
the shared ``local[2]`` session cannot.

    python sink_query.py --input DIR --checkpoint DIR --url URL [--master local[2,3]] [--option k=v …]

Prints ``DONE <rows> <seconds>`` when the query has processed every file (Trigger.AvailableNow).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession

SCHEMA = "f INT, i INT, k BIGINT"


def main() -> None:
    t0 = time.monotonic()
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--max-files-per-trigger", default="2")
    parser.add_argument("--option", action="append", default=[], help="sink option key=value")
    args = parser.parse_args()

    spark = (
        SparkSession.builder.master(args.master)
        .appName("durable-streams-sink-query")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(f"SESSION {time.monotonic() - t0:.2f}", flush=True)
    import pyspark_durable_streams

    pyspark_durable_streams.register(spark)
    source = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", args.max_files_per_trigger).json(args.input)
    writer = (
        source.writeStream.format("durable_streams")
        .option("url", args.url)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
    )
    for item in args.option:
        key, _, value = item.partition("=")
        writer = writer.option(key, value)
    started = time.monotonic()
    query = writer.start()
    print(f"STARTED {query.id} {time.monotonic() - t0:.2f}", flush=True)
    query.awaitTermination()
    rows = sum(progress["numInputRows"] for progress in query.recentProgress)
    print(f"DONE {rows} {time.monotonic() - started:.2f}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
