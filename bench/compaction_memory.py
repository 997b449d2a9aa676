"""Compaction's memory: the peak RSS of a fresh server's first compaction pass over a big store.

Not a timed test. The server is a black box (``scale_probe.Probe``): a ``durable-streams-server``
subprocess on 127.0.0.1 with a temp data dir under /tmp, removed at the end.

1. **Store**: a server with compaction off; ``--streams`` streams, one client thread each,
   written with bulk appends (``application/vnd.apache.arrow.stream``) of ``--append-mib`` of
   random (incompressible) ``--message-bytes`` messages until ``--stored-mib`` of message bytes
   are stored, paced at ``--store-mib-s`` in all: each flush (one a second, the default)
   writes one file holding every stream's messages of that second, as a server written to
   at that rate for a while would have; files of half the compaction target or more would be
   settled and never rewritten, so the first pass has the whole store to bin-pack. Then a
   graceful stop (everything flushed).
2. **Compact**: a fresh server on that data dir with the default options except
   ``--compaction-interval-s 3`` (so the first pass starts 3 s after start-up instead of
   10 min; the pass itself is the same). The pass's duration comes from ``/metrics``, the
   process's peak RSS from ``/proc/PID/status`` (VmHWM: the largest RSS since the process
   started, so nothing between two samples is missed), its RSS when ready from VmRSS, and
   the Parquet bytes it wrote from the files that appeared in the data dir.

    python bench/compaction_memory.py [--stored-mib 1024] [--streams 10] [--message-bytes 1024]
        [--append-mib 1] [--store-mib-s 16] [--server-args "--memory-budget 268435456"]
        [--before REV]

``--before REV``: a copy of the same store is first compacted by a server running the code of
git revision ``REV`` (its ``server/`` from ``git archive``, first on ``PYTHONPATH``), with the
same options: its numbers are the table's comparison column. With the defaults (1 GiB stored,
default server options) the peak RSS row carries the target (<= 1,024 MiB) and the record
(``bench/results/compaction_memory.json``) fills bench/README.md's ``compaction-memory``
section; any other setting makes a scratch record.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from benchkit import Result, Target, report, value_at_most
from bulk_bench import ARROW, bulk_body
from scale_probe import MIB, NO_COMPACTION, OCTETS, REPO, Probe, Work, dir_bytes, new_bytes, note, parquet_files
from server_bench import _request as request

PASSES = "durable_streams_compaction_duration_seconds_count"
PASS_SECONDS = "durable_streams_compaction_duration_seconds_sum"
PASS_FAILURES = "durable_streams_compaction_failures_total"
TARGET_MIB = 1024
STEM = "compaction_memory"
DEFAULTS = {
    "stored_mib": 1024,
    "streams": 10,
    "message_bytes": 1024,
    "append_mib": 1,
    "store_mib_s": 16,
    "server_args": "",
}


def random_messages(count: int, size: int) -> pa.Array:
    """``count`` random messages of ``size`` bytes each, as one binary array."""
    data = np.random.default_rng().bytes(count * size)
    offsets = np.arange(0, (count + 1) * size, size, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def store(probe: Probe, streams: int, stored_mib: int, message_bytes: int, append_mib: int, mib_s: float) -> float:
    """Write the store (step 1); MiB/s of message bytes acknowledged."""
    paths = [f"/v1/stream/compaction-{index}" for index in range(streams)]
    for path in paths:
        probe.create(path)
    per_append = max(1, append_mib * MIB // message_bytes)
    appends = -(-stored_mib * MIB // (per_append * message_bytes * streams))
    headers = {"Content-Type": ARROW, "Stream-Bulk-Content-Type": OCTETS["Content-Type"]}
    failures: list[str] = []
    interval = per_append * message_bytes * streams / MIB / mib_s
    started = time.perf_counter()

    def write(path: str) -> None:
        conn = probe.connection()
        try:
            for index in range(appends):
                time.sleep(max(0.0, started + index * interval - time.perf_counter()))
                status, _, body = request(
                    conn, "POST", path, bulk_body(random_messages(per_append, message_bytes)), headers
                )
                if status != 204:
                    failures.append(f"{path}: bulk append answered {status}: {body[:200]!r}")
                    return
        finally:
            conn.close()

    threads = [threading.Thread(target=write, args=(path,)) for path in paths]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(failures[0])
    return appends * per_append * message_bytes * streams / MIB / elapsed


def first_pass(probe: Probe, server_args: list[str], name: str) -> dict[str, float]:
    """Start a fresh server on the stored data and wait for its first compaction pass (step 2)."""
    before = parquet_files(probe.data_dir)
    probe.start(["--compaction-interval-s", "3", *server_args])
    ready_rss = probe.rss_mib()
    ready_cpu = probe.cpu_s()
    deadline = time.monotonic() + 3600
    while True:
        metrics = probe.metrics()
        if metrics.get(PASS_FAILURES, 0.0) > 0:
            raise RuntimeError(f"the compaction pass failed: see {probe.process.log_path}")
        if PASSES not in metrics:
            raise RuntimeError(f"/metrics has no {PASSES}: the probe needs it")
        if metrics[PASSES] >= 1:
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the first compaction pass did not finish within an hour")
        time.sleep(0.1)
    peak = probe.peak_rss_mib()
    cpu = probe.cpu_s() - ready_cpu
    after = parquet_files(probe.data_dir)
    probe.stop()
    note(
        f"{name}: pass 1 took {metrics[PASS_SECONDS]:.1f} s, peak RSS {peak:,.0f} MiB (ready: {ready_rss:.0f}), "
        f"{len(before)} -> {len(after)} Parquet files, {new_bytes(before, after) / MIB:,.0f} MiB written"
    )
    return {
        "seconds": metrics[PASS_SECONDS],
        "cpu": cpu,
        "peak": peak,
        "ready_rss": ready_rss,
        "files_before": len(before),
        "files_after": len(after),
        "written_mib": new_bytes(before, after) / MIB,
    }


def checkout(rev: str, into: Path) -> str:
    """The server package of ``rev`` (``git archive``) under ``into``; the full commit hash."""
    commit = subprocess.run(["git", "rev-parse", rev], capture_output=True, text=True, cwd=REPO, check=True)
    archive = subprocess.run(["git", "archive", rev, "server"], capture_output=True, cwd=REPO, check=True)
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return commit.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stored-mib", type=int, default=DEFAULTS["stored_mib"])
    parser.add_argument("--streams", type=int, default=DEFAULTS["streams"])
    parser.add_argument("--message-bytes", type=int, default=DEFAULTS["message_bytes"])
    parser.add_argument("--append-mib", type=int, default=DEFAULTS["append_mib"])
    parser.add_argument("--store-mib-s", type=float, default=DEFAULTS["store_mib_s"], help="pace of the writers")
    parser.add_argument("--server-args", default=DEFAULTS["server_args"], help="flags of the compacting server")
    parser.add_argument("--before", help="also compact a copy of the store with the server code of this git revision")
    args = parser.parse_args()
    settings = vars(args).copy()
    before_rev = settings.pop("before")
    of_record = settings == DEFAULTS
    server_args = shlex.split(args.server_args)
    work = Work()
    before: dict[str, float] | None = None
    try:
        probe = work.probe("store", NO_COMPACTION)
        probe.start()
        note(f"storing {args.stored_mib:,} MiB in {args.streams} streams ({args.message_bytes:,} B messages)")
        rate = store(probe, args.streams, args.stored_mib, args.message_bytes, args.append_mib, args.store_mib_s)
        probe.wait_flushed()
        probe.stop()
        on_disk = dir_bytes(probe.data_dir) / MIB
        note(f"stored at {rate:.0f} MiB/s; {on_disk:,.0f} MiB on disk")
        if before_rev:
            settings["before"] = checkout(before_rev, work.root / "before-code")
            other = work.probe("before", NO_COMPACTION)
            shutil.copytree(probe.data_dir, other.data_dir)
            other.process.env = {"PYTHONPATH": str(work.root / "before-code" / "server")}
            before = first_pass(other, server_args, f"code of {before_rev}")
            work.done(other)
        done = first_pass(probe, server_args, "this code")
    finally:
        work.close()
    label = f"compaction pass 1, {args.stored_mib:,} MiB in {args.streams} streams"

    def row(name: str, key: str, target: Target | None = None) -> Result:
        return Result(f"{label}: {name}", done[key], before[key] if before else None, target)

    results = [
        row("peak RSS MiB", "peak", value_at_most(TARGET_MIB) if of_record else None),
        row("RSS when ready (before the pass) MiB", "ready_rss"),
        row("s", "seconds"),
        row("CPU s of the server from ready to the pass's end", "cpu"),
        row("Parquet MiB written", "written_mib"),
        row("Parquet files before", "files_before"),
        row("Parquet files after (old files kept until vacuum)", "files_after"),
    ]
    report(
        STEM,
        "compaction-memory" if of_record else None,
        "Compaction memory: a fresh server's first pass",
        f"code of {before_rev}" if before_rev else "-",
        results,
        {**settings, "stored_on_disk_mib": round(on_disk), "ingest_mib_s": round(rate, 1)},
        kind="a fresh server's first compaction pass (loopback, this disk, 2 cores shared with other work)",
        work_dir=work.root,
    )


if __name__ == "__main__":
    main()
