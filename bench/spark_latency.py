"""The ``latency`` group of ``spark_bench.py``: append → row visible in a streaming query's
``foreachBatch``, for messages appended one by one at a steady pace.

A streaming query reads a JSON stream of our server with a processing-time trigger into a
``foreachBatch`` that collects each batch and notes the time; each message carries
``time.time()`` from just before its append. Three messages first warm the query up.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from benchkit import Result, percentile, progress, value_at_most
from pyspark.sql import DataFrame, SparkSession
from spark_kit import connection, create_json_stream, send

IDLE_S = 2.0
"""A connection idle this long is not reused: the server closes idle keep-alive connections
(uvicorn's default after 5 s), and the warm-up's first batches can take longer than that."""


def latency(
    spark: SparkSession,
    base: str,
    read_options: dict[str, str],
    checkpoint: Path,
    trigger_ms: int,
    latency_messages: int,
    latency_interval_ms: int,
) -> list[Result]:
    """Latencies in ms of ``latency_messages`` appends, one every ``latency_interval_ms``."""
    url = create_json_stream(base, "latency")
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
        spark.readStream.format("durable_streams")
        .options(**read_options)
        .option("url", url)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )
    conn, path = connection(url)
    used = [time.monotonic()]

    def append(ident: str) -> None:
        if time.monotonic() - used[0] > IDLE_S:
            conn.close()  # (the next request connects again)
        body = json.dumps({"id": ident, "t": time.time(), "pad": "x" * 50}, separators=(",", ":"))
        send(conn, "POST", path, body.encode(), "application/json")
        used[0] = time.monotonic()

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
    finally:
        query.stop()
        conn.close()
    latencies = tuple(1000 * arrived[ident] for ident in idents)
    metric = f"append → visible in foreachBatch (trigger {trigger_ms} ms), {count} msgs"
    return [
        Result(
            f"{metric}: p50 ms",
            percentile(latencies, 0.5),
            None,
            value_at_most(300),
            latencies,
            (),
            f"p50 of {count}",
        ),
        Result(f"{metric}: p99 ms", percentile(latencies, 0.99), None, None, latencies, (), f"p99 of {count}"),
    ]
