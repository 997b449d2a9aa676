"""Bulk appends: server ingest from one client, and where the server's CPU goes.

One client sends bulk appends (``Content-Type: application/vnd.apache.arrow.stream`` +
``Stream-Bulk-Content-Type``) of ``--batch`` 100-byte messages each, one request after the
other on one keep-alive connection (``--in-flight N``: N requests in flight, one connection
each, as the client's ``Producer`` with ``max_in_flight=N``), to our server with its defaults (WAL durability: an
answer means the messages are fsync'd; local Delta storage). Each request's body is built
before the clock starts; the rate is messages acknowledged per second of wall time, for an
octet-stream stream and for a JSON stream (whose messages the server validates one by one).

With ``--profile DIR`` the server runs under ``py-spy record`` (``pip install py-spy``) and a
text summary of the busiest functions is printed per scenario (raw samples in DIR).

    python bench/bulk_bench.py [--messages 1000000] [--batch 10000] [--in-flight 1] [--profile DIR]

The Spark side (a streaming write into a JSON and an octet-stream stream beside
a discarding Python writer) is ``bench/bulk_spark_bench.py``.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parent.parent
sys.path += [str(REPO / "tests")]

from benchkit import Result, progress, report, value_at_least  # noqa: E402
from servers import ServerProcess  # noqa: E402

ARROW = "application/vnd.apache.arrow.stream"
TARGETS = {"application/octet-stream": 1_000_000, "application/json": 500_000}


def messages(first: int, count: int, json_stream: bool) -> pa.Array:
    """``count`` messages of exactly 100 bytes (JSON objects for JSON streams)."""
    ids = pc.utf8_lpad(pc.cast(pa.array(np.arange(first, first + count)), pa.string()), 10, "0")
    if json_stream:
        prefix, suffix = '{"id":"', '","pad":"' + "x" * (100 - 7 - 10 - 9 - 2) + '"}'
    else:
        prefix, suffix = "msg-", "-" + "y" * (100 - 4 - 10 - 1)
    return pc.binary_join_element_wise(prefix, ids, suffix, "").cast(pa.binary())


def bulk_body(values: pa.Array) -> bytes:
    batch = pa.record_batch([values], names=["data"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def ingest(port: int, path: str, content_type: str, total: int, batch: int, in_flight: int) -> float:
    """Messages acknowledged per second, one client keeping ``in_flight`` requests in flight
    (one keep-alive connection each, as the Python client's producer does)."""
    json_stream = content_type == "application/json"
    assert total % batch == 0
    bodies = queue.SimpleQueue[bytes]()
    for first in range(0, total, batch):
        bodies.put(bulk_body(messages(first, batch, json_stream)))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("PUT", path, headers={"Content-Type": content_type})
    response = conn.getresponse()
    response.read()
    assert response.status == 201, response.status
    conn.close()
    headers = {"Content-Type": ARROW, "Stream-Bulk-Content-Type": content_type}
    failures: list[str] = []

    def send() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            try:
                body = bodies.get_nowait()
            except queue.Empty:
                break
            conn.request("POST", path, body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            if response.status != 204:
                failures.append(f"bulk append answered {response.status}")
                break
        conn.close()

    threads = [threading.Thread(target=send) for _ in range(in_flight)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(failures[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("HEAD", path)
    tail = conn.getresponse().getheader("Stream-Next-Offset")
    conn.close()
    if tail != f"{total:016d}_0000000000000000":
        raise RuntimeError(f"the stream's tail is {tail}, not {total}")
    return total / elapsed


def _profile_summary(raw: Path, top: int = 18) -> str:
    """Self and total shares of the busiest functions in py-spy's ``--format raw`` output."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = [frame.split(" (")[0] + " " + frame.split("/")[-1].rstrip(")") for frame in stack.split(";")]
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    lines = [f"{samples} samples; self%  total%  function"]
    for frame, count in own.most_common(top):
        lines.append(f"{100 * count / samples:5.1f}  {100 * inclusive[frame] / samples:6.1f}  {frame}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--in-flight", type=int, default=1, help="requests the client keeps in flight")
    parser.add_argument("--profile", type=Path, help="run the server under py-spy; raw samples go here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bulk-bench-"))
    results, summaries = [], {}
    try:
        for content_type, target in TARGETS.items():
            server = ServerProcess(work / content_type.replace("/", "-"), []).start()
            spy = None
            raw = None
            try:
                if args.profile is not None:
                    args.profile.mkdir(parents=True, exist_ok=True)
                    raw = args.profile / f"server-{content_type.replace('/', '-')}.txt"
                    spy = subprocess.Popen(
                        [
                            str(Path(sys.executable).parent / "py-spy"),
                            "record",
                            "--pid",
                            str(server.proc.pid if server.proc else 0),
                            "--format",
                            "raw",
                            "--rate",
                            "200",
                            "--output",
                            str(raw),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    time.sleep(1.0)
                progress(f"{content_type}: {args.messages:,} messages in bulk appends of {args.batch:,}")
                rate = ingest(server.port, "/v1/stream/ingest", content_type, args.messages, args.batch, args.in_flight)
                results.append(
                    Result(
                        f"server ingest, one client ({args.in_flight} in flight), {args.batch:,}-message bulk "
                        f"appends of 100 B, {content_type}, msgs/s",
                        rate,
                        None,
                        value_at_least(target),
                    )
                )
            finally:
                if spy is not None:
                    spy.send_signal(signal.SIGINT)
                    spy.wait(timeout=60)
                server.stop()
            if raw is not None and raw.exists():
                summaries[content_type] = _profile_summary(raw)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(
        "bulk_server",
        "bulk-server",
        "Bulk appends: server ingest",
        "-",
        results,
        {
            "messages": args.messages,
            "batch": args.batch,
            "in flight": args.in_flight,
            "profiled": args.profile is not None,
        },
    )
    for content_type, summary in summaries.items():
        print(f"\npy-spy, server process, {content_type} (self% = in the function itself):\n{summary}")


if __name__ == "__main__":
    main()
