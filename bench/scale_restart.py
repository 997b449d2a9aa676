"""Restart cost against what the server holds: Delta commits of one stream, bucketed streams.

Start-up time is measured from spawning the process to ``/readyz`` answering 200, as the
median of ``RESTARTS`` graceful restarts (SIGTERM, so the server flushes first; the page cache
stays warm), with the CPU seconds the process used by then and the latency of the first
``GET offset=-1`` after it. Compaction stays off: no checkpoint shortens the Delta log.

- Commits: one stream gets 100 B appends with ``--flush-interval-ms 5``, each waiting until
  ``/metrics`` counts one more Delta commit, so N appends are N commits (if the counter is
  missing, appends are paced by time and the count is not checked). Sizes accumulate: the
  stream grows to each size in turn and is restarted there. The mean commit duration over
  the last 500 appends before each restart (``/metrics``) shows how commits age.
- Streams: ``BUCKETS`` buckets, streams created round-robin in them by 4 processes x 8
  threads of concurrent ``PUT``s carrying 16 B each, also accumulating.
"""

from __future__ import annotations

import http.client
import statistics
import time

from benchkit import Result, value_at_most
from harness import request, spawn, threads
from scale_probe import MIB, NO_COMPACTION, OCTETS, Probe, Work, dir_bytes, note, target_at

COMMITS = "durable_streams_delta_commit_duration_seconds_count"
COMMIT_SECONDS = "durable_streams_delta_commit_duration_seconds_sum"
RESTARTS = 3
BUCKETS = 10


def restarts(probe: Probe, read_path: str) -> tuple[float, float, float]:
    """Median over ``RESTARTS`` graceful restarts: (ms to ready, first GET ms, CPU s used by then)."""
    timings: list[tuple[float, float, float]] = []
    for _ in range(RESTARTS):
        probe.stop()
        seconds = probe.start()
        cpu = probe.cpu_s()
        timings.append((1000 * seconds, probe.first_read_ms(read_path), cpu))
    ms, first_ms, cpu = (statistics.median(column) for column in zip(*timings, strict=True))
    return ms, first_ms, cpu


# -- restart ---------------------------------------------------------------------------------


def restart_group(work: Work, flushes: list[int], streams: list[int]) -> list[Result]:
    empty = work.probe("empty", NO_COMPACTION)
    empty.start()
    empty.create("/v1/stream/empty")
    empty_ms, _, empty_cpu = restarts(empty, "/v1/stream/empty")
    work.done(empty)
    note(f"restart of an (almost) empty data dir: {empty_ms:.0f} ms, {empty_cpu:.2f} CPU s")
    results = [Result("restart, one empty stream: ms", empty_ms)]
    results += restart_after_flushes(work, flushes, empty_ms)
    results += restart_with_streams(work, streams, empty_ms)
    return results


def restart_after_flushes(work: Work, sizes: list[int], empty_ms: float) -> list[Result]:
    probe = work.probe("flushes", ["--flush-interval-ms", "5", *NO_COMPACTION])
    probe.start()
    path = "/v1/stream/paced"
    probe.create(path)
    results, done = [], 0
    for size in sizes:
        commit_ms = _append_paced(probe, path, done, size - done)
        stretch = min(500, size - done)
        done = size
        stored = dir_bytes(probe.data_dir) / MIB
        ms, first_ms, cpu = restarts(probe, path)
        note(f"{size:,} paced appends ({stored:.1f} MiB on disk): restart {ms:.0f} ms, first GET {first_ms:.1f} ms")
        label = f"restart after {size:,} paced appends (one stream, one Delta commit each)"
        results += [
            Result(f"{label}: ms", ms, empty_ms, target_at(size, 20_000, value_at_most(1500))),
            Result(f"{label}: CPU s by ready", cpu),
            Result(f"{label}: first GET offset=-1 ms", first_ms, None, target_at(size, 20_000, value_at_most(300))),
        ]
        if commit_ms is not None:
            results.append(Result(f"{label}: mean Delta commit ms, last {stretch} appends", commit_ms))
    work.done(probe)
    return results


def _append_paced(probe: Probe, path: str, done: int, count: int) -> float | None:
    """``count`` 100 B appends, each waiting for its own Delta commit on ``/metrics``; the mean
    commit duration over the last 500 (None, and appends paced by time, without the counter)."""
    conn = probe.connection()
    commits = probe.metrics().get(COMMITS)
    if commits is None:
        note("  /metrics has no Delta commit counter: appends are paced by time, commits not checked")
    mark: tuple[float, float] | None = None
    started = time.perf_counter()
    for index in range(count):
        if commits is not None and index == max(0, count - 500):
            metrics = probe.metrics()
            mark = (metrics[COMMIT_SECONDS], metrics[COMMITS])
        status, _, _ = request(conn, "POST", path, b"p" * 100, OCTETS)
        assert status == 204, status
        if commits is None:
            time.sleep(0.05)  # leave the flusher time for each append
            continue
        commits += 1
        while probe.metric(COMMITS) < commits:
            time.sleep(0.01)  # each scrape costs the server CPU: do not poll harder
        if (done + index + 1) % 500 == 0:
            note(f"  {done + index + 1:,} paced appends ({500 / (time.perf_counter() - started):.1f}/s)")
            started = time.perf_counter()
    conn.close()
    if mark is None:
        return None
    metrics = probe.metrics()
    return 1000 * (metrics[COMMIT_SECONDS] - mark[0]) / max(1.0, metrics[COMMITS] - mark[1])


def put_streams(port: int, paths: list[str], processes: int = 4, threads: int = 8) -> None:
    """Create ``paths`` (16 B each) from ``processes`` x ``threads`` concurrent clients."""
    spawn(_put_worker, [(port, paths[i::processes], threads) for i in range(processes)])


def _put_worker(port: int, paths: list[str], clients: int) -> int:
    """In a load-generator process: create ``paths`` from ``clients`` threads (16 B body each)."""

    def create(share: list[str]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        for path in share:
            status, _, body = request(conn, "PUT", path, b"s" * 16, OCTETS)
            assert status in (200, 201), (status, path, body[:300])
        conn.close()

    threads(create, [paths[i::clients] for i in range(clients)])
    return len(paths)


def restart_with_streams(work: Work, sizes: list[int], empty_ms: float) -> list[Result]:
    probe = work.probe("streams", NO_COMPACTION)
    probe.start()
    conn = probe.connection()
    for bucket in range(BUCKETS):
        status, _, body = request(conn, "PUT", f"/bucket-{bucket}")
        assert status in (200, 201), (status, body[:300])
    conn.close()
    results, made = [], 0
    for size in sizes:
        paths = [f"/bucket-{i % BUCKETS}/stream-{i}" for i in range(made, size)]
        started = time.perf_counter()
        for start in range(0, len(paths), 25_000):
            batch = paths[start : start + 25_000]
            put_streams(probe.port, batch)
            rate = (start + len(batch)) / (time.perf_counter() - started)
            note(f"  {made + start + len(batch):,} streams ({rate:.0f}/s)")
        made = size
        probe.wait_flushed()
        stored = dir_bytes(probe.data_dir) / MIB
        ms, first_ms, cpu = restarts(probe, f"/bucket-{(size // 2) % BUCKETS}/stream-{size // 2}")
        note(f"{size:,} bucketed streams ({stored:.1f} MiB on disk): restart {ms:.0f} ms, first GET {first_ms:.1f} ms")
        label = f"restart with {size:,} bucketed streams (16 B each, {BUCKETS} buckets)"
        results += [
            Result(f"{label}: ms", ms, empty_ms, target_at(size, 300_000, value_at_most(3000))),
            Result(f"{label}: CPU s by ready", cpu),
            Result(f"{label}: first GET offset=-1 ms", first_ms),
        ]
    work.done(probe)
    return results
