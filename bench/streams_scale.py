"""Many streams on one server: what holding 10,000, 100,000 and 1,000,000 streams costs, ours
with its default options against the reference server where it takes the load.

Both servers keep their data in one directory each for the whole run, and the streams
accumulate: each size is reached by creating the streams it adds (32 clients: 4 processes x
8 keep-alive connections, ``loadgen``; empty ``text/plain`` streams, as the server
benchmark's creation row). Every window (each server's creates, ours' appends) starts once both
servers have gone quiet (under 5% of a core for a second, at most a minute): what one does after
a load (flushes, streams put to sleep, a checkpoint) is not to land in the next window, its own
or the other's. First, each server is warmed up with ``--warm-up`` creates of
streams of its own (50,000 by default; they stay, so each server holds that many streams
beside each size's): the reference's creates start slow and climb (~1,500-7,000/s over its
first 10,000, ~9,000-13,000/s after), and a rate taken in that climb measures its start. The
warm-up's creates/s is a row of its own. At each size, ours is measured:

- creates/s of that step (first create to last) and RSS (``VmRSS``) 3 s after it;
- appends: 32 clients appending 100 B for ``--seconds`` to 32 streams (one each), then
  32 clients appending for as long, each append to a stream drawn at random from all of
  them (a stream nobody has touched since its creation, nearly always: the cost of waking
  it), and the ratio of the two rates;
- a read of one stream (``GET offset=-1`` of 200 random streams, one connection: p50) and a
  page of the status listing (``GET /v1/status/streams?limit=50``, median of 5), and the
  longest of the ``HEAD``s of one stream that another connection sends back to back while
  those pages are made (how long a page holds the event loop from other requests);
- a graceful restart (SIGTERM, then spawn): seconds from the spawn to the first answer (a
  ``HEAD`` of a random stream), RSS right after that answer and 3 s later, and the peak RSS
  until that answer (``VmHWM``: recovery's high-water mark).

The reference server (``@durable-streams/server``, file-backed) is measured at each size
(up to ``--reference-up-to``, every size by default): creates/s and RSS. Targets: at every size, creates/s at least
1.5x the reference's and RSS at most 768 MiB (the default 512 MiB ``--memory-budget`` plus
the process's base) after creating and after a restart, a restart to the first answer in at
most 5 s, random-stream appends at least 0.8x the 32-stream appends.

    python bench/streams_scale.py [--sizes 10000,100000,1000000] [--reference-up-to 1000000]
        [--seconds 5] [--warm-up 50000]

The default sizes make a run of record (``bench/results/streams_scale.json``, rendered into
bench/README.md); other sizes go to ``bench/results/scratch/``.
"""

from __future__ import annotations

import argparse
import http.client
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path += [str(REPO / "tests"), str(REPO / "tests" / "conformance")]

import loadgen  # noqa: E402
from benchkit import Measured, Result, compared, progress, report, value_at_least, value_at_most  # noqa: E402
from benchkit import at_least as ratio_at_least  # noqa: E402
from harness import PROCESSES, request, spawn  # noqa: E402
from procfs import rss_mib, settle, status_kib  # noqa: E402
from runner import ReferenceServer, start_reference_server  # noqa: E402
from server_bench import PAYLOAD, _expect, create_all  # noqa: E402
from servers import ServerProcess  # noqa: E402

SIZES = [10_000, 100_000, 1_000_000]
CLIENTS = 32
RSS_BOUND_MIB = 768
WARM_UP = 50_000
TEXT = {"Content-Type": "text/plain"}


def _names(count: int, prefix: str = "scale") -> list[str]:
    return [f"{prefix}-{index:07d}" for index in range(count)]


def create_streams(port: int, pid: int, names: list[str]) -> Measured:
    """Creates ``names`` from 32 clients: creates/s, and RSS 3 s after."""
    elapsed = create_all(port, names)
    time.sleep(3)  # (past a WAL flush, and the idle streams' first turns)
    rss = rss_mib(pid)
    return (
        Measured()
        .add("creates/s", len(names) / elapsed, (len(names), elapsed), "creates / s, first to last (raw: count, s)")
        .add("RSS MiB after creating", rss, (rss,), "VmRSS 3 s after the last create")
    )


def warm_up(ours: ServerProcess, reference: ReferenceServer | None, count: int) -> Result:
    """Each server creates ``count`` streams of its own (``warm-…``) before anything is measured:
    the row of their creates/s, no target (the rate of a start, not of creates)."""
    names = _names(count, "warm")
    progress(f"warm-up: ours creates {count:,}")
    assert ours.proc is not None
    measured = create_streams(ours.port, ours.proc.pid, names)
    other = None
    if reference is not None:
        settle(ours.proc.pid, reference.pid)
        progress(f"warm-up: the reference creates {count:,}")
        other = create_streams(int(reference.url.rsplit(":", 1)[1]), reference.pid, names)
    return compared(f"warm-up, {count:,} streams: creates/s", measured, other, "creates/s")


def _random_appends(port: int, names: list[str], seed: int) -> Iterator[bytes]:
    draw = random.Random(seed)
    while True:
        yield loadgen.render("POST", f"/v1/stream/{draw.choice(names)}", port, PAYLOAD, TEXT)


def _append_worker(port: int, paths: list[str] | None, names: list[str], seed: int, seconds: float) -> int:
    """``CLIENTS // PROCESSES`` connections appending for ``seconds``: each to its own stream of
    ``paths``, or (``paths`` None) each append to a random one of ``names``."""
    deadline = time.perf_counter() + seconds
    clients = CLIENTS // PROCESSES
    if paths is not None:
        sources = [iter(lambda path=path: loadgen.render("POST", path, port, PAYLOAD, TEXT), None) for path in paths]
    else:
        sources = [_random_appends(port, names, seed * clients + client) for client in range(clients)]
    return loadgen.drive(port, sources, _expect(204), deadline)


def appends(port: int, names: list[str], seconds: float) -> Measured:
    """Appends/s to 32 streams, then to random ones of ``names``; the ratio of the two."""
    fixed = [f"/v1/stream/{name}" for name in names[:CLIENTS]]
    per_process = CLIENTS // PROCESSES
    spread = spawn(
        _append_worker,
        [(port, fixed[i * per_process : (i + 1) * per_process], [], i, seconds) for i in range(PROCESSES)],
    )
    randomly = spawn(_append_worker, [(port, None, names, i, seconds) for i in range(PROCESSES)])
    rate, spread_rate = sum(randomly) / seconds, sum(spread) / seconds
    how = f"acknowledged appends of {PROCESSES} processes / {seconds:g} s (raw: per process)"
    return (
        Measured()
        .add("appends/s, 32 streams", spread_rate, spread, how)
        .add("appends/s, random streams", rate, randomly, how)
        .add("random / 32-stream appends", rate / spread_rate, (rate, spread_rate), "ratio (raw: random, 32 streams)")
    )


def _heads_beside(port: int, path: str, stop: threading.Event, took: list[float], refused: list[int]) -> None:
    """``HEAD``s of ``path`` back to back until ``stop``: each one's ms into ``took``, the status of
    any not answered 200 into ``refused`` (checked by the caller: a thread's assert would only print)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    while not stop.is_set():
        started = time.perf_counter()
        status, _, _ = request(conn, "HEAD", path)
        took.append((time.perf_counter() - started) * 1000)
        if status != 200:
            refused.append(status)
    conn.close()


def looks(port: int, names: list[str]) -> Measured:
    """p50 of reading one random stream whole; median of a status listing page, and the longest
    ``HEAD`` of one stream sent beside those pages."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    reads = []
    for name in random.Random(1).sample(names, 200):
        started = time.perf_counter()
        status, _, _ = request(conn, "GET", f"/v1/stream/{name}?offset=-1")
        reads.append((time.perf_counter() - started) * 1000)
        assert status == 200, status
    pages: list[float] = []
    heads: list[float] = []
    refused: list[int] = []
    stop = threading.Event()
    beside = threading.Thread(target=_heads_beside, args=(port, f"/v1/stream/{names[0]}", stop, heads, refused))
    beside.start()
    try:
        for _ in range(5):
            started = time.perf_counter()
            status, _, body = request(conn, "GET", "/v1/status/streams?limit=50")
            pages.append((time.perf_counter() - started) * 1000)
            assert status == 200, (status, body[:200])
    finally:
        stop.set()
        beside.join()
    assert heads and not refused, (len(heads), refused[:5])
    conn.close()
    return (
        Measured()
        .add("read of one stream p50 ms", statistics.median(reads), reads, "p50 of 200 reads of random streams")
        .add("status listing page ms", statistics.median(pages), pages, "median of 5 pages of 50")
        .add(
            "longest HEAD beside the listing ms",
            max(heads),
            (len(heads), statistics.median(heads), max(heads)),
            "the slowest of the HEADs sent back to back beside the pages (raw: count, p50, max)",
        )
    )


def restart(server: ServerProcess, names: list[str]) -> Measured:
    """A graceful restart: seconds from the spawn to a first answer, RSS then and 3 s later."""
    server.stop()
    spawned = time.monotonic()
    server.start()
    assert server.proc is not None
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    status, _, _ = request(conn, "HEAD", f"/v1/stream/{random.choice(names)}")
    answered = time.monotonic() - spawned
    assert status == 200, status
    conn.close()
    first = rss_mib(server.proc.pid)
    peak = status_kib(server.proc.pid, "VmHWM") / 1024
    time.sleep(3)
    later = rss_mib(server.proc.pid)
    return (
        Measured()
        .add("restart to first answer s", answered, (answered,), "spawn to the first HEAD's answer")
        .add("RSS MiB after restart", max(first, later), (first, later), "VmRSS at the first answer and 3 s later")
        .add("peak RSS MiB of the restart", peak, (peak,), "VmHWM at the first answer (recovery's peak)")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(str(size) for size in SIZES), help="stream counts, ascending")
    parser.add_argument("--reference-up-to", type=int, default=SIZES[-1], help="largest size the reference is given")
    parser.add_argument("--seconds", type=float, default=5.0, help="each append window")
    parser.add_argument("--warm-up", type=int, default=WARM_UP, help="creates each server makes before the sizes")
    args = parser.parse_args()
    sizes = sorted(int(size) for size in args.sizes.split(","))
    work = Path(tempfile.mkdtemp(prefix="ds-streams-"))
    names = _names(sizes[-1])
    results: list[Result] = []
    ours = ServerProcess(work / "ours").start()
    reference = start_reference_server(work / "reference", long_poll_timeout_ms=30_000)
    try:
        if args.warm_up:
            results.append(warm_up(ours, reference if args.reference_up_to else None, args.warm_up))
        created = referenced = 0
        for size in sizes:
            step = names[created:size]
            assert ours.proc is not None
            settle(ours.proc.pid, reference.pid)
            progress(f"{size:,} streams: ours creates {len(step):,}")
            measured = create_streams(ours.port, ours.proc.pid, step)
            created = size
            other: Measured | None = None
            if size <= args.reference_up_to:
                settle(ours.proc.pid, reference.pid)
                progress(f"{size:,} streams: the reference creates {size - referenced:,}")
                port = int(reference.url.rsplit(":", 1)[1])
                other = create_streams(port, reference.pid, names[referenced:size])
                referenced = size
            settle(ours.proc.pid, reference.pid)
            progress(f"{size:,} streams: appends, reads, a listing page, a restart (ours)")
            for part in (appends(ours.port, names[:size], args.seconds), looks(ours.port, names[:size])):
                measured.update(part)
                measured.raw.update(part.raw)
                measured.how.update(part.how)
            restarted = restart(ours, names[:size])
            for metric in restarted:
                measured.add(metric, restarted[metric], restarted.raw[metric], restarted.how[metric])
            progress(f"  {size:,}: " + ", ".join(f"{metric} {value:,.2f}" for metric, value in measured.items()))
            targets = {
                "creates/s": ratio_at_least(1.5),
                "RSS MiB after creating": value_at_most(RSS_BOUND_MIB),
                "RSS MiB after restart": value_at_most(RSS_BOUND_MIB),
                "restart to first answer s": value_at_most(5),
                "random / 32-stream appends": value_at_least(0.8),
            }
            for metric in measured:
                compared_with = other if other is not None and metric in other else None
                results.append(
                    compared(f"{size:,} streams: {metric}", measured, compared_with, metric, targets.get(metric))
                )
    finally:
        ours.kill()
        reference.stop()
    of_record = sizes == SIZES and args.warm_up == WARM_UP
    settings = {
        "sizes": sizes,
        "reference_up_to": args.reference_up_to,
        "seconds": args.seconds,
        "warm_up": args.warm_up,
    }
    title = "Streams at scale (ours: default options, WAL durability, local Delta; reference: file-backed)"
    report(
        "streams_scale", "streams_scale" if of_record else None, title, "reference", results, settings, work_dir=work
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
