"""The ``latency`` group of ``spark_bench.py``: append → row visible in a streaming query's
``foreachBatch``, for messages appended one by one at a steady pace, and the floor under it.

A streaming query reads a JSON stream of our server with a processing-time trigger into a
``foreachBatch`` that collects each batch and notes the time; each message carries
``time.time()`` from just before its append. Three messages first warm the query up.

The floor: the same query, trigger, pace and sink over a Python source that does nothing but
hand Spark the lines a local file has gained (``floor_source``), each message one line written
where ours is posted. What it measures is Spark's micro-batch and a Python source's round trips
at this trigger: the least any Python source reaches here. The rows give both p50s and ours
above the floor (the target: ≤ 300 ms, or within 50 ms of the floor). Each feed runs an untimed
window first (``WARM_MESSAGES``), so that neither pays the session's warm-up.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchkit import Result, percentile, progress, value_at_most
from floor_source import FileLines
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from spark_kit import connection, create_json_stream, send

WARM_MESSAGES = 20
"""Messages of the untimed window each feed runs first: a session's first streaming query pays
the JVM's warm-up of the streaming engine (measured: ours' p50 264 ms as a session's first query,
210-221 ms in the next two of ours in that session), and without it the feed that ran first paid
it alone."""
IDLE_S = 2.0
"""A connection idle this long is not reused: the server closes idle keep-alive connections
(uvicorn's default after 5 s), and the warm-up's first batches can take longer than that."""


@dataclass
class Feed:
    """Where the timed messages go and the streaming frame that reads them."""

    frame: Callable[[SparkSession], DataFrame]
    append: Callable[[bytes], None]
    close: Callable[[], None]


def ours(base: str, read_options: dict[str, str]) -> Feed:
    """Messages posted to a JSON stream of our server, read by the connector."""
    url = create_json_stream(base, "latency")
    conn, path = connection(url)
    used = [time.monotonic()]

    def append(body: bytes) -> None:
        if time.monotonic() - used[0] > IDLE_S:
            conn.close()  # (the next request connects again)
        send(conn, "POST", path, body, "application/json")
        used[0] = time.monotonic()

    def frame(spark: SparkSession) -> DataFrame:
        return spark.readStream.format("durable_streams").options(**read_options).option("url", url).load()

    return Feed(frame, append, conn.close)


def floor(path: Path) -> Feed:
    """Messages written as lines of a local file, read by the do-nothing source (``floor_source``)."""
    lines = FileLines(str(path))

    def frame(spark: SparkSession) -> DataFrame:
        return spark.readStream.format("bench_file_lines").option("path", str(path)).load()

    return Feed(frame, lines.append, lines.close)


def latency(
    spark: SparkSession,
    base: str,
    read_options: dict[str, str],
    work: Path,
    trigger_ms: int,
    latency_messages: int,
    latency_interval_ms: int,
) -> list[Result]:
    """Ours and the floor's latencies in ms of ``latency_messages`` appends, one every
    ``latency_interval_ms``, as rows."""
    warm = (trigger_ms, min(WARM_MESSAGES, latency_messages), latency_interval_ms)
    progress(f"latency: a window of each, {warm[1]} messages, not timed (the session's first streaming queries)")
    latencies(spark, ours(base, read_options), work / "ours-warm-checkpoint", *warm)
    latencies(spark, floor(work / "floor-warm.jsonl"), work / "floor-warm-checkpoint", *warm)
    timing = (trigger_ms, latency_messages, latency_interval_ms)
    progress("latency: ours")
    mine, my_steps = latencies(spark, ours(base, read_options), work / "ours-checkpoint", *timing)
    progress("latency: the floor (a source that reads a local file)")
    least, floor_steps = latencies(spark, floor(work / "floor.jsonl"), work / "floor-checkpoint", *timing)
    count = latency_messages
    metric = f"append → visible in foreachBatch (trigger {trigger_ms} ms), {count} msgs"
    p50, p50_floor = percentile(mine, 0.5), percentile(least, 0.5)
    p99, p99_floor = percentile(mine, 0.99), percentile(least, 0.99)
    return [
        Result(f"{metric}: p50 ms", p50, p50_floor, value_at_most(300), mine, least, f"p50 of {count}"),
        Result(f"{metric}: p99 ms", p99, p99_floor, None, mine, least, f"p99 of {count}"),
        Result(
            f"{metric}: p50 ms above the floor",
            p50 - p50_floor,
            None,
            value_at_most(50),
            (),
            (),
            "ours' p50 - the floor's p50",
        ),
        *(
            Result(
                f"{metric}: a batch's {step} ms",
                my_steps.get(step, float("nan")),
                floor_steps.get(step, float("nan")),
                None,
                (),
                (),
                "median of the batches with rows (Spark's durationMs)",
            )
            for step in ("triggerExecution", "latestOffset", "addBatch", "walCommit", "commitOffsets")
        ),
    ]


def latencies(
    spark: SparkSession,
    feed: Feed,
    checkpoint: Path,
    trigger_ms: int,
    latency_messages: int,
    latency_interval_ms: int,
) -> tuple[tuple[float, ...], dict[str, float]]:
    """Latencies in ms of ``latency_messages`` messages fed one every ``latency_interval_ms``, and
    the median ms of each step of the query's batches that had rows (``batch_steps``)."""
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
        feed.frame(spark)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )

    def append(ident: str) -> None:
        feed.append(json.dumps({"id": ident, "t": time.time(), "pad": "x" * 50}, separators=(",", ":")).encode())

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
        count, interval = latency_messages, latency_interval_ms / 1000
        progress(f"latency: {count} messages, one every {interval * 1000:.0f} ms")
        idents = [f"m-{index}" for index in range(count)]
        for ident in idents:
            append(ident)
            time.sleep(interval)
        wait_for(idents, 60)
        steps = batch_steps(query)
        progress(f"latency: a batch's steps, ms (median of the batches with rows): {steps}")
    finally:
        query.stop()
        feed.close()
    return tuple(1000 * arrived[ident] for ident in idents), steps


def batch_steps(query: StreamingQuery) -> dict[str, float]:
    """The median ms of each step Spark times (``durationMs``) over its recent batches that had rows."""
    steps: dict[str, list[float]] = {}
    for update in query.recentProgress:
        if update.numInputRows:
            for step, ms in update.durationMs.items():
                steps.setdefault(step, []).append(float(ms))
    return {step: percentile(values, 0.5) for step, values in sorted(steps.items())}
