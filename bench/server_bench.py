"""Side-by-side benchmark: our server against the reference Node server, same load, one run.

Both servers run on this machine at the same time (ours with its defaults: WAL durability,
local Delta storage; the reference with its file-backed store), and every scenario is run
against each in turn; the table reports both and the ratio ours/reference. The numbers
are noisy on a shared 2-core machine: read the ratios, not the absolute values.

    python bench/server_bench.py [--quick]

The load generator uses ``http.client`` keep-alive connections (lighter than requests) and
several processes for the concurrent scenarios, so that it is less of a bottleneck than
the servers it measures.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "conformance")]

from runner import start_reference_server  # noqa: E402
from servers import ServerProcess  # noqa: E402

PAYLOAD = b"x" * 100


@dataclass
class Target:
    name: str
    port: int

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)


def _request(
    conn: http.client.HTTPConnection,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def _create(target: Target, path: str, content_type: str = "application/octet-stream") -> None:
    status, _, _ = _request(target.connection(), "PUT", path, headers={"Content-Type": content_type})
    assert status in (200, 201), status


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# -- scenarios ---------------------------------------------------------------------------


def sequential_appends(target: Target, count: int) -> dict[str, float]:
    path = f"/v1/stream/seq-{uuid.uuid4().hex}"
    _create(target, path)
    conn = target.connection()
    latencies = []
    started = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        status, _, _ = _request(conn, "POST", path, PAYLOAD, {"Content-Type": "application/octet-stream"})
        latencies.append(time.perf_counter() - t0)
        assert status == 204, status
    elapsed = time.perf_counter() - started
    return {
        "appends/s": count / elapsed,
        "p50 ms": 1000 * _percentile(latencies, 0.5),
        "p99 ms": 1000 * _percentile(latencies, 0.99),
    }


def _append_worker(port: int, paths: list[str], seconds: float, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    counts = []

    def loop(path: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        done = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            status, _, _ = _request(conn, "POST", path, PAYLOAD, {"Content-Type": "application/octet-stream"})
            assert status == 204, status
            done += 1
        counts.append(done)

    threads = [threading.Thread(target=loop, args=(path,)) for path in paths]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.put(sum(counts))


def concurrent_appends(target: Target, clients: int, streams: int, seconds: float) -> dict[str, float]:
    paths = [f"/v1/stream/conc-{uuid.uuid4().hex}" for _ in range(streams)]
    for path in paths:
        _create(target, path)
    per_client = [paths[i % streams] for i in range(clients)]
    processes = 4
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue = context.Queue()  # type: ignore[type-arg]
    workers = [
        context.Process(target=_append_worker, args=(target.port, per_client[i::processes], seconds, results))
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    total = sum(results.get(timeout=seconds + 60) for _ in workers)
    for worker in workers:
        worker.join()
    return {"appends/s": total / seconds}


def catch_up_read(target: Target, mebibytes: int) -> dict[str, float]:
    path = f"/v1/stream/read-{uuid.uuid4().hex}"
    _create(target, path)
    conn = target.connection()
    chunk = b"r" * (1024 * 1024)
    for _ in range(mebibytes):
        status, _, _ = _request(conn, "POST", path, chunk, {"Content-Type": "application/octet-stream"})
        assert status == 204
    received = 0
    offset = "-1"
    started = time.perf_counter()
    while True:
        status, headers, body = _request(conn, "GET", f"{path}?offset={offset}")
        assert status == 200, status
        received += len(body)
        offset = headers["stream-next-offset"]
        if headers.get("stream-up-to-date") == "true":
            break
    elapsed = time.perf_counter() - started
    assert received == mebibytes * len(chunk), received
    return {"MiB/s": mebibytes / elapsed}


def long_poll_wake(target: Target, readers: int, rounds: int) -> dict[str, float]:
    path = f"/v1/stream/lp-{uuid.uuid4().hex}"
    _create(target, path)
    writer = target.connection()
    latencies: list[float] = []
    lock = threading.Lock()

    def reader(tail: str, ready: threading.Barrier, sent_at: list[float]) -> None:
        conn = target.connection()
        conn.request("GET", f"{path}?offset={tail}&live=long-poll")
        ready.wait()
        response = conn.getresponse()
        response.read()
        arrived = time.perf_counter()
        with lock:
            latencies.append(arrived - sent_at[0])

    for _ in range(rounds):
        _, headers, _ = _request(writer, "HEAD", path)
        sent_at: list[float] = []
        ready = threading.Barrier(readers + 1)
        args = (headers["stream-next-offset"], ready, sent_at)
        threads = [threading.Thread(target=reader, args=args) for _ in range(readers)]
        for thread in threads:
            thread.start()
        ready.wait()
        time.sleep(0.05)  # let the requests reach the server and park
        sent_at.append(time.perf_counter())
        _request(writer, "POST", path, PAYLOAD, {"Content-Type": "application/octet-stream"})
        for thread in threads:
            thread.join()
    return {"p50 ms": 1000 * _percentile(latencies, 0.5), "p99 ms": 1000 * _percentile(latencies, 0.99)}


def memory_for_streams(target: Target, pid: int, streams: int) -> dict[str, float]:
    conn = target.connection()
    before = _rss_mib(pid)
    for index in range(streams):
        status, _, _ = _request(conn, "PUT", f"/v1/stream/mem-{index}", PAYLOAD, {"Content-Type": "text/plain"})
        assert status in (200, 201)
    return {"RSS MiB": _rss_mib(pid), "growth MiB": _rss_mib(pid) - before}


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


# -- the run -----------------------------------------------------------------------------

HIGHER_IS_BETTER = {"appends/s", "MiB/s"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller loads (a smoke run)")
    args = parser.parse_args()
    scale = 0.2 if args.quick else 1.0
    work = Path(tempfile.mkdtemp(prefix="ds-bench-"))
    ours = ServerProcess(work / "ours").start()
    reference = start_reference_server(work / "reference", long_poll_timeout_ms=30_000)
    assert ours.proc is not None
    targets = {
        "ours": Target("ours", ours.port),
        "reference": Target("reference", int(reference.url.rsplit(":", 1)[1])),
    }
    pids = {"ours": ours.proc.pid, "reference": reference.pid}
    scenarios: list[tuple[str, Callable[[Target], dict[str, float]]]] = [
        ("sequential 100 B appends, 1 client", lambda t: sequential_appends(t, int(3000 * scale))),
        ("32 clients, one stream", lambda t: concurrent_appends(t, 32, 1, 5 * scale + 1)),
        ("32 clients, 32 streams", lambda t: concurrent_appends(t, 32, 32, 5 * scale + 1)),
        ("catch-up read, 50 MiB stream", lambda t: catch_up_read(t, max(5, int(50 * scale)))),
        ("long-poll wake, 1 reader", lambda t: long_poll_wake(t, 1, int(50 * scale) + 5)),
        ("long-poll wake, 32 readers", lambda t: long_poll_wake(t, 32, int(20 * scale) + 3)),
    ]
    rows = []
    try:
        for title, scenario in scenarios:
            results = {name: scenario(target) for name, target in targets.items()}
            for metric in results["ours"]:
                ours_value, ref_value = results["ours"][metric], results["reference"][metric]
                rows.append(
                    (title, metric, ours_value, ref_value, ours_value / ref_value if ref_value else float("nan"))
                )
                print(f"{title:38} {metric:11} ours {ours_value:10.2f}  reference {ref_value:10.2f}", flush=True)
        streams = int(10_000 * scale)
        memory = {name: memory_for_streams(target, pids[name], streams) for name, target in targets.items()}
        for metric in ("RSS MiB", "growth MiB"):
            ours_value, ref_value = memory["ours"][metric], memory["reference"][metric]
            rows.append((f"memory, {streams} streams", metric, ours_value, ref_value, ours_value / ref_value))
    finally:
        ours.kill()
        reference.stop()
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("| scenario | metric | ours | reference | ours/reference | better |")
    print("|---|---|---:|---:|---:|---|")
    for title, metric, ours_value, ref_value, ratio in rows:
        better = "higher" if metric in HIGHER_IS_BETTER else "lower"
        print(f"| {title} | {metric} | {ours_value:.2f} | {ref_value:.2f} | {ratio:.2f}x | {better} |")
    print(json.dumps({"rows": rows}), file=sys.stderr)


if __name__ == "__main__":
    main()
