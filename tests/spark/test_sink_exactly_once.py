"""Exactly-once streaming writes: a clean run, task failures retried by Spark, and a SIGKILLed query.

Every test counts what the server stored: each input row exactly once, each input file's rows
in file order (a file is read by one task, in order: per-partition order).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession
from servers import ServerProcess
from sink_support import SCHEMA, assert_exactly_once, message_count, read_json, write_input

from pyspark_durable_streams.client import Client

QUERY_SCRIPT = Path(__file__).with_name("sink_query.py")


def _create_json_stream(url: str) -> None:
    with Client(url) as client:
        client.stream(url).create("application/json")


def test_streaming_write_of_100k_rows_is_exactly_once(
    spark: SparkSession, server: ServerProcess, tmp_path: Path
) -> None:
    total = write_input(tmp_path / "in", files=10, rows_per_file=10_000)
    url = server.stream_url("sink-100k")
    query = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 4)
        .json(str(tmp_path / "in"))
        .writeStream.format("durable_streams")
        .option("url", url)
        .option("createStream", "true")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    started = time.monotonic()
    query.awaitTermination(120)
    elapsed = time.monotonic() - started
    assert query.exception() is None
    assert [p["batchId"] for p in query.recentProgress] == [0, 1, 2]
    rows = read_json(url)
    assert_exactly_once(rows, total)
    print(f"\n100k exactly-once streaming write: {total / elapsed:,.0f} rows/s ({elapsed:.2f}s)")

    # The same query restarted from its checkpoint with nothing new writes nothing.
    again = (
        spark.readStream.schema(SCHEMA)
        .json(str(tmp_path / "in"))
        .writeStream.format("durable_streams")
        .option("url", url)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    again.awaitTermination(60)
    assert again.id == query.id
    assert message_count(url) == total


def _run_query(*args: str, env: dict[str, str] | None = None, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(QUERY_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_tasks_that_die_mid_partition_are_retried_exactly_once(server: ServerProcess, tmp_path: Path) -> None:
    """Every first attempt of every task exits its process after 7 acknowledged requests; Spark
    (``local[2,3]``: 3 attempts per task) retries it; the retry re-sends seq 0..6 (204) and goes on."""
    total = write_input(tmp_path / "in", files=4, rows_per_file=2_500)
    url = server.stream_url("sink-task-retries")
    _create_json_stream(url)
    result = _run_query(
        "--input", str(tmp_path / "in"),
        "--checkpoint", str(tmp_path / "checkpoint"),
        "--url", url,
        "--master", "local[2,3]",
        "--max-files-per-trigger", "4",
        "--option", "maxBatchMessages=100",
        "--option", "_testFailAfterRequests=7",
        env={"DURABLE_STREAMS_TEST_HOOKS": "1"},
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert f"DONE {total}" in result.stdout
    # The hook really killed both tasks' first attempts mid-partition (one batch, two tasks of 2 files).
    assert output.count("test hook: exiting the task's process after 7 requests") >= 2, output[-4000:]
    assert_exactly_once(read_json(url), total)


def test_query_killed_mid_batch_and_restarted_from_its_checkpoint_is_exactly_once(
    spark: SparkSession, server: ServerProcess, tmp_path: Path
) -> None:
    rows_per_file, files_per_batch = 8_000, 1
    batch_rows = rows_per_file * files_per_batch
    total = write_input(tmp_path / "in", files=3, rows_per_file=rows_per_file)
    url = server.stream_url("sink-sigkill")
    _create_json_stream(url)
    sink_options = {"maxBatchMessages": "20", "maxRequestsInFlight": "1"}
    args = [
        "--input", str(tmp_path / "in"),
        "--checkpoint", str(tmp_path / "checkpoint"),
        "--url", url,
        "--max-files-per-trigger", str(files_per_batch),
        *(arg for key, value in sink_options.items() for arg in ("--option", f"{key}={value}")),
    ]  # fmt: skip
    # Run 1: SIGKILL the whole process group (driver, JVM, Python workers) while a batch is half written.
    # Its output goes to a file: a pipe nobody reads while the query runs can fill up (Spark's log
    # on a busy machine) and block the query before it writes anything.
    log_path = tmp_path / "query-1.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(QUERY_SCRIPT), *args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 240  # (a JVM's start and the first batch's plan on a loaded CI)
        mid_batch, stored = False, 0
        while time.monotonic() < deadline and process.poll() is None:
            stored = message_count(url)
            if stored >= batch_rows // 4 and stored % batch_rows not in range(0, batch_rows // 10):
                mid_batch = True
                break
            time.sleep(0.01)  # (a poll in a loop that checks: the kill must land mid-batch)
        output = log_path.read_text(errors="replace")[-4000:]
        assert process.poll() is None, f"the query finished before it could be killed:\n{output}"
        assert mid_batch, f"the query wrote no batch's first quarter within 240 s ({stored} rows):\n{output}"
        os.killpg(process.pid, signal.SIGKILL)
    finally:  # (the whole group, whether or not the driver is still there: its JVM and workers too)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    time.sleep(0.5)  # (appends the killed query had sent may still land: nothing marks their end)
    at_kill = message_count(url)
    assert 0 < at_kill < total
    assert at_kill % batch_rows != 0, f"killed at a batch boundary ({at_kill} rows): not mid-batch"
    committed = {p.name for p in (tmp_path / "checkpoint" / "commits").iterdir() if p.name.isdigit()}
    planned = {p.name for p in (tmp_path / "checkpoint" / "offsets").iterdir() if p.name.isdigit()}
    assert planned - committed, "no batch was in flight when the query was killed"

    # Run 2: the same checkpoint re-runs the unfinished batch (same batch id, same files, same sink
    # options) and goes on; in this test's session (a JVM of its own, not the killed one's), which
    # saves a second Spark start-up.
    restarted = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", files_per_batch)
        .json(str(tmp_path / "in"))
        .writeStream.format("durable_streams")
        .option("url", url)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .options(**sink_options)
        .trigger(availableNow=True)
        .start()
    )
    finished = restarted.awaitTermination(150)
    restarted.stop()
    assert finished and restarted.exception() is None
    assert_exactly_once(read_json(url), total)
