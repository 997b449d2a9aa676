"""What stored bytes cost: cold catch-up, compaction, and memory under many active streams.

- Catch-up: one stream of N MiB written as 1 MiB random (incompressible) appends and flushed;
  the server stops, the page cache is dropped (when permitted), the server starts, reads a
  small other stream from Delta (paging in its own code), and one client reads the stream
  from ``offset=-1`` to its tail; the process's ``/proc/PID/io``
  ``read_bytes`` over that read divided by the bytes served is what the disk read per byte;
  a second read right after is the warm one. A read still going after ``READ_LIMIT_S`` stops
  there and reports its rate so far (then there is no warm read).
- Compaction: the server restarts on the same data with a 3 s compaction interval. Pass 1's
  duration comes from ``/metrics`` (the compaction histogram's sum), its peak RSS from
  VmHWM, what it wrote from the Parquet files that appeared in the data dir; pass 2 then
  runs with nothing new stored, and its new Parquet bytes are what it rewrote.
- Memory: ``ACTIVE_STREAMS`` streams written round-robin in 64 KiB random appends by
  ``CLIENTS`` clients up to each stored size (accumulating), then every stream read whole by
  the same clients; RSS 2 s later and the peak so far, against the idle server's RSS.
"""

from __future__ import annotations

import functools
import os
import time

from benchkit import Result, at_least, value_at_least, value_at_most
from harness import request, threads
from scale_probe import (
    MIB,
    NO_COMPACTION,
    OCTETS,
    Probe,
    Work,
    dir_bytes,
    drop_caches,
    new_bytes,
    note,
    parquet_files,
    target_at,
)
from scale_restart import put_streams

PASSES = "durable_streams_compaction_duration_seconds_count"
PASS_SECONDS = "durable_streams_compaction_duration_seconds_sum"
PASS_FAILURES = "durable_streams_compaction_failures_total"
ACTIVE_STREAMS = 500
CLIENTS = 16
WARM_UP = "/v1/stream/warm-up"
READ_LIMIT_S = 600  # a catch-up read slower than this reports its rate so far (1 GiB took 29 min at 4ff31d8)


# -- storage: cold catch-up and compaction ----------------------------------------------------


def storage_group(work: Work, sizes: list[int]) -> tuple[list[Result], bool]:
    """Rows for each stored size, and whether the page cache could be dropped for cold reads."""
    results: list[Result] = []
    dropped = True
    for mebibytes in sizes:
        probe = work.probe(f"stored-{mebibytes}", NO_COMPACTION)
        probe.start()
        path = "/v1/stream/big"
        probe.create(path)
        conn = probe.connection()
        started = time.perf_counter()
        for index in range(mebibytes):
            status, _, _ = request(conn, "POST", path, os.urandom(MIB), OCTETS)
            assert status == 204, status
            if (index + 1) % 256 == 0:
                note(f"  {index + 1:,} MiB written ({(index + 1) / (time.perf_counter() - started):.0f} MiB/s)")
        conn.close()
        probe.wait_flushed()
        probe.create(WARM_UP, b"w" * 1024)  # flushed on its own: its files hold none of the big stream
        probe.wait_flushed()
        probe.stop()
        note(f"{mebibytes:,} MiB stored ({dir_bytes(probe.data_dir) / MIB:,.0f} MiB on disk)")
        rows, cold_dropped = catch_up(probe, path, mebibytes)
        dropped = dropped and cold_dropped
        results += rows + compaction(probe, mebibytes)
        work.done(probe)
    return results, dropped


def catch_up(probe: Probe, path: str, mebibytes: int) -> tuple[list[Result], bool]:
    dropped = drop_caches()
    probe.start(NO_COMPACTION)
    probe.read_all(WARM_UP)  # pages in the code of a history read, so that the cold read counts data
    read_before = probe.disk_read_bytes()
    size, cold_s = probe.read_all(path, mebibytes * MIB, "cold catch-up", READ_LIMIT_S)
    disk_per_byte = (probe.disk_read_bytes() - read_before) / size
    cold = size / MIB / cold_s
    label = f"catch-up read of one idle {mebibytes:,} MiB stream after a restart"
    warm: float | None = None
    if size < mebibytes * MIB:  # stopped at the time limit: a rate so far, and no warm read
        label += f" (stopped after {cold_s:.0f} s at {size / MIB:,.0f} MiB)"
    else:
        _, warm_s = probe.read_all(path, mebibytes * MIB, "warm catch-up", READ_LIMIT_S)
        warm = mebibytes / warm_s
    probe.stop()
    note(f"  catch-up of {mebibytes:,} MiB: cold {cold:.1f} MiB/s (page cache dropped: {dropped}), warm {warm}")
    return [
        Result(f"{label}, cold: MiB/s (baseline: warm)", cold, warm, target_at(mebibytes, 1024, at_least(0.33))),
        Result(f"{label}, cold: MiB/s", cold, None, target_at(mebibytes, 1024, value_at_least(100))),
        Result(f"{label}, cold: disk bytes read per byte served", disk_per_byte),
    ], dropped


def compaction(probe: Probe, mebibytes: int) -> list[Result]:
    """Pass 1 over the flushed files, then pass 2 with nothing new; both from the first start."""
    files = [parquet_files(probe.data_dir)]
    probe.start(["--compaction-interval-s", "3"])
    rss_before = probe.rss_mib()
    cpu_before = probe.cpu_s()
    passes: list[dict[str, float]] = []
    deadline = time.monotonic() + 3600
    while len(passes) < 2:
        metrics = probe.metrics()
        if metrics.get(PASS_FAILURES, 0.0) > 0:
            raise RuntimeError(f"a compaction pass failed: see {probe.process.log_path}")
        if metrics.get(PASSES, 0.0) > len(passes):
            files.append(parquet_files(probe.data_dir))
            passes.append({"s": metrics[PASS_SECONDS], "peak": probe.peak_rss_mib(), "cpu": probe.cpu_s()})
            note(f"  compaction pass {len(passes)} of {mebibytes:,} MiB done ({metrics[PASS_SECONDS]:.1f} s total)")
        elif PASSES not in metrics:
            raise RuntimeError(f"/metrics has no {PASSES}: the harness needs it")
        if time.monotonic() > deadline:
            raise RuntimeError("compaction passes did not finish within an hour")
        time.sleep(0.1)
    probe.stop()
    first, second = passes
    label = f"compaction, {mebibytes:,} MiB stored"
    written = [new_bytes(files[0], files[1]) / MIB, new_bytes(files[1], files[2]) / MIB]
    note(
        f"  pass 1: {first['s']:.1f} s, peak RSS {first['peak']:.0f} MiB, {written[0]:.0f} MiB written; "
        f"pass 2: {second['s'] - first['s']:.1f} s, {written[1]:.0f} MiB written"
    )
    return [
        Result(f"{label}, pass 1: s", first["s"]),
        Result(f"{label}, pass 1: CPU s", first["cpu"] - cpu_before),
        Result(
            f"{label}, pass 1: peak RSS MiB (baseline: RSS before)",
            first["peak"],
            rss_before,
            target_at(mebibytes, 1024, value_at_most(1024)),
        ),
        Result(f"{label}, pass 1: Parquet MiB written", written[0]),
        Result(f"{label}, pass 2 (nothing new): s", second["s"] - first["s"]),
        Result(
            f"{label}, pass 2 (nothing new): Parquet MiB written",
            written[1],
            None,
            target_at(mebibytes, 1024, value_at_most(0)),
        ),
    ]


# -- memory: many active streams ----------------------------------------------------------------


def memory_group(work: Work, sizes: list[int], budget_mib: float | None) -> list[Result]:
    args = [] if budget_mib is None else ["--memory-budget", str(int(budget_mib * MIB))]
    probe = work.probe("memory", args)
    probe.start()
    time.sleep(1)
    baseline = probe.rss_mib()
    paths = [f"/v1/stream/active-{i}" for i in range(ACTIVE_STREAMS)]
    put_streams(probe.port, paths, threads=4)
    chunk = 64 * 1024
    results, stored = [], 0

    def write(share: list[str], rounds: int) -> None:
        conn = probe.connection()
        for _ in range(rounds):
            for path in share:
                status, _, _ = request(conn, "POST", path, os.urandom(chunk), OCTETS)
                assert status == 204, status
        conn.close()

    def read(share: list[str]) -> None:
        for path in share:
            probe.read_all(path)

    shares = [paths[i::CLIENTS] for i in range(CLIENTS)]
    for mebibytes in sizes:
        rounds = max(0, -(-(mebibytes * MIB - stored) // (chunk * ACTIVE_STREAMS)))  # at least the size
        started = time.perf_counter()
        threads(functools.partial(write, rounds=rounds), shares)
        stored += rounds * chunk * ACTIVE_STREAMS
        note(
            f"  {stored / MIB:,.0f} MiB written to {ACTIVE_STREAMS} streams "
            f"({rounds * chunk * ACTIVE_STREAMS / MIB / (time.perf_counter() - started):.0f} MiB/s); reading all"
        )
        threads(read, shares)
        time.sleep(2)
        rss, peak = probe.rss_mib(), probe.peak_rss_mib()
        note(f"{stored / MIB:,.0f} MiB in {ACTIVE_STREAMS} active streams: RSS {rss:.0f} MiB, peak {peak:.0f} MiB")
        label = f"{ACTIVE_STREAMS} active streams, {stored / MIB:,.0f} MiB stored, after writing + reading all"
        bound = None if budget_mib is None else value_at_most(budget_mib + baseline)
        results += [
            Result(
                f"{label}: RSS MiB (baseline: idle server)",
                rss,
                baseline,
                target_at(mebibytes, 2048, bound) if bound else None,
            ),
            Result(f"{label}: peak RSS MiB", peak),
        ]
    work.done(probe)
    return results
