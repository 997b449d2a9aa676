"""What the Spark benchmarks share: JSON streams on a server (made, filled, counted), timed runs
and the rows made from them, and a streaming query run to its end (``Trigger.AvailableNow``).

A row made from timed runs keeps every run's seconds as its raw values and names its statistic:
``rate_row`` takes the median run of each side unless asked for the fastest (``best``).
"""

from __future__ import annotations

import http.client
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchkit import LOOPBACK, Result, median, progress
from direct_reads import Timed
from memory_source import json_values
from pyspark.sql import DataFrame
from pyspark.sql.streaming.query import StreamingQuery

FILL_MESSAGES_PER_POST = 10_000


# -- servers and streams ---------------------------------------------------------------------


def send(conn: http.client.HTTPConnection, method: str, path: str, body: bytes, content_type: str) -> None:
    conn.request(method, path, body=body, headers={"Content-Type": content_type})
    response = conn.getresponse()
    response.read()
    if response.status not in (200, 201, 204):
        raise RuntimeError(f"{method} {path}: HTTP {response.status}")


def connection(url: str) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or LOOPBACK, parts.port or 80, timeout=120), parts.path


def create_json_stream(base: str, name: str) -> str:
    url = f"{base}/v1/stream/{name}-{uuid.uuid4().hex[:8]}"
    conn, path = connection(url)
    send(conn, "PUT", path, b"", "application/json")
    conn.close()
    return url


def fill_json_stream(base: str, name: str, rows: int, label: str) -> str:
    """A new JSON stream holding messages 0 … rows-1, appended as large JSON-array POSTs."""
    url = create_json_stream(base, name)
    conn, path = connection(url)
    started, step = time.perf_counter(), max(1, rows // 5)
    for first in range(0, rows, FILL_MESSAGES_PER_POST):
        count = min(FILL_MESSAGES_PER_POST, rows - first)
        body = "[" + ",".join(json_values(first, count).to_pylist()) + "]"
        send(conn, "POST", path, body.encode(), "application/json")
        if (first + count) // step != first // step and first + count < rows:
            progress(f"  filling {label}: {first + count:,}/{rows:,} messages")
    conn.close()
    progress(f"  filled {label} with {rows:,} messages in {time.perf_counter() - started:.1f}s")
    return url


def message_count(url: str) -> int:
    """Our server's tail offset starts with the stream's message count."""
    conn, path = connection(url)
    conn.request("HEAD", path)
    response = conn.getresponse()
    response.read()
    conn.close()
    return int(response.getheader("Stream-Next-Offset", "0_").split("_")[0])


# -- measuring -------------------------------------------------------------------------------


def timed_runs(label: str, rows: int, repeat: int, run: Callable[[], None]) -> Timed:
    """``repeat`` runs of ``run``, one after another; the seconds of each."""
    timed = Timed()
    for attempt in range(repeat):
        started = time.perf_counter()
        run()
        elapsed = time.perf_counter() - started
        timed.seconds.append(elapsed)
        progress(
            f"  {label}: {rows:,} rows in {elapsed:.2f}s = {rows / elapsed:,.0f} rows/s (run {attempt + 1}/{repeat})"
        )
    return timed


def best_rate(label: str, rows: int, repeat: int, run: Callable[[], None]) -> float:
    """Rows per second of the fastest of ``repeat`` runs."""
    return timed_runs(label, rows, repeat, run).best_rate(rows)


def rate_row(metric: str, rows: int, ours: Timed, other: Timed | None, best: bool = False, **target: Any) -> Result:
    """Rows/s of ``ours`` beside ``other``: the median run of each (``best``: the fastest), with
    every run's seconds kept as the raw values."""
    pick = min if best else median
    return Result(
        metric,
        rows / pick(ours.seconds),
        rows / pick(other.seconds) if other is not None else None,
        target.get("target"),
        tuple(ours.seconds),
        tuple(other.seconds) if other is not None else (),
        f"rows / {'fastest' if best else 'median'} of {len(ours.seconds)} runs' s (raw: s per run)",
    )


def cpu_row(metric: str, ours: Timed, other: Timed, **target: Any) -> Result:
    """The server's CPU seconds during a read, median of the runs, beside another read's."""
    return Result(
        metric,
        median(ours.server_cpu),
        median(other.server_cpu),
        target.get("target"),
        tuple(ours.server_cpu),
        tuple(other.server_cpu),
        f"median of {len(ours.server_cpu)} runs (raw: CPU s per run)",
    )


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
