"""The SSE fan-out scenario of ``server_bench.py``: many readers tail one JSON stream with
``live=sse`` while one writer appends messages that carry their append time.

Readers run in ``PROCESSES`` processes of threads on ``http.client`` (their cost is per byte, not
per request); each notes, per message, the time from the start of its append to the arrival of
the event that carries it. Latencies across processes compare ``time.monotonic()`` stamps, which
on Linux is one system-wide clock.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import threading
import time
import uuid
from typing import Any

from benchkit import LOOPBACK, Measured, percentile, progress
from harness import PROCESSES, Server, create, gather, in_process, request, tail, threads

SSE_IDLE_TIMEOUT_S = 30  # a reader that hears nothing this long counts the rest as missing


def _sse_stamps(event: bytes) -> list[float]:
    """The append times carried by one SSE ``data`` event of a JSON stream (an array of messages)."""
    kind, data = b"message", []
    for line in event.split(b"\n"):
        name, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if name == b"event":
            kind = value
        elif name == b"data":
            data.append(value)
    if kind != b"data":
        return []
    return [float(message["t"]) for message in json.loads(b"\n".join(data))]


def _sse_worker(
    port: int, path: str, offset: str, readers: int, expected: int, ready: multiprocessing.Queue[Any]
) -> list[float]:
    """``readers`` SSE connections tailing ``path``; each notes when each message arrives.

    Puts True on ``ready`` once every connection has its response headers (False if one failed).
    """
    latencies: list[float] = []
    lock = threading.Lock()
    connected = threading.Barrier(readers + 1, timeout=60)

    def reader() -> None:
        conn = http.client.HTTPConnection(LOOPBACK, port, timeout=SSE_IDLE_TIMEOUT_S)
        try:
            conn.request("GET", f"{path}?offset={offset}&live=sse")
            response = conn.getresponse()
            assert response.status == 200, response.status
        except BaseException:
            connected.abort()
            raise
        connected.wait()
        mine: list[float] = []
        buffer = b""
        try:
            while len(mine) < expected:
                chunk = response.read1(65536)
                if not chunk:
                    break
                arrived = time.monotonic()
                *events, buffer = (buffer + chunk).split(b"\n\n")
                mine += [arrived - stamp for event in events for stamp in _sse_stamps(event)]
        except TimeoutError:
            pass  # counted as missing deliveries
        conn.close()
        with lock:
            latencies.extend(mine)

    def announce() -> None:
        try:
            connected.wait()
            ready.put(True)
        except threading.BrokenBarrierError:
            ready.put(False)  # the failed reader raises its own error

    def run(index: int) -> None:
        if index == 0:
            announce()
        else:
            reader()

    threads(run, list(range(readers + 1)))
    return latencies


def sse_fan_out(server: Server, readers: int, messages: int, interval_s: float) -> Measured:
    """``readers`` SSE readers on one JSON stream; one writer appends stamped messages, pausing
    ``interval_s`` after each acknowledgement (the reference server answers an append only after
    reading it back from its file once per waiting reader, so its pace is slower)."""
    path = f"/v1/stream/sse-{uuid.uuid4().hex}"
    create(server, path, "application/json")
    writer = server.connection()
    offset = tail(writer, path)
    context = multiprocessing.get_context("spawn")
    ready: multiprocessing.Queue[Any] = context.Queue()
    results: multiprocessing.Queue[Any] = context.Queue()
    shares = [readers // PROCESSES + (i < readers % PROCESSES) for i in range(PROCESSES)]
    workers = [
        context.Process(
            target=in_process, args=(_sse_worker, (server.port, path, offset, share, messages, ready), results)
        )
        for share in shares
        if share
    ]
    for worker in workers:
        worker.start()
    if not all([ready.get(timeout=90) for _ in workers]):
        gather(results, len(workers), 90)  # raises the failed worker's error
    time.sleep(0.2)
    pad = "x" * 70
    for _ in range(messages):
        body = json.dumps({"t": time.monotonic(), "pad": pad}).encode()
        status, _, _ = request(writer, "POST", path, body, {"Content-Type": "application/json"})
        assert status == 204, status
        time.sleep(interval_s)
    latencies = [latency for share in gather(results, len(workers), SSE_IDLE_TIMEOUT_S + 30) for latency in share]
    for worker in workers:
        worker.join()
    expected = readers * messages
    if len(latencies) < expected:
        progress(f"  {server.name}: only {len(latencies)} of {expected} SSE deliveries arrived")
    raw = [1000 * latency for latency in latencies]
    of = f"of {len(raw):,} deliveries ({expected:,} sent)"
    return (
        Measured()
        .add("p50 ms", percentile(raw, 0.5), raw, f"p50 {of}")
        .add("p99 ms", percentile(raw, 0.99), raw, f"p99 {of}")
    )
