"""Overload memory: a server's RSS while clients write faster than it can make appends durable.

Not a timed test. The load: a server with its default options takes 1 GiB of 1 MiB binary
appends (``application/octet-stream``) from 4 clients as fast as they go (a server that let its
writes in flight grow peaked at 3 GiB and stayed near 1 GiB after the load stopped, so a container
with a 1 GiB limit OOM-killed it). The bar: peak RSS <= 1.5x ``--memory-budget`` during the burst, under the budget
within 20 s of the burst's end.

1. **Burst**: a ``durable-streams-server`` subprocess (``scale_probe.Probe``: 127.0.0.1, a temp
   data dir) with the default options plus ``--server-args``; ``--clients`` threads, each with a
   keep-alive connection, post ``--append-mib`` appends of random bytes to a stream of their own
   as fast as they go until ``--total-mib`` are acknowledged. A 503 or 429 is a refusal: the
   client waits its ``Retry-After`` and posts the same body again (a refusal without
   ``Retry-After`` is counted apart); any other answer, or a connection closed, is an error.
   Every acknowledged append's id, digest and offset is kept (``Burst.acks``) for a read-back.
2. **RSS**: ``/proc/PID/status`` every 100 ms (``RssSampler``): VmRSS, and VmHWM (the peak since
   the process started, so nothing between samples is missed). After the burst the sampler
   runs 20 s more: the RSS at that point is the row "20 s after", and the first sample under the
   budget (the default's 512 MiB of RSS; with another ``--budget-mib``, that much above idle)
   the row "s until under the budget".
3. **Compaction after kill -9** (``--compaction``): a second burst like the first, the server
   killed (SIGKILL) as it ends, with what was not yet in Delta in its WAL; a fresh one starts on
   the same data dir with ``--compaction-interval-s 3`` (its WAL is replayed and flushed first),
   and its VmHWM once its first compaction pass is over is read (``compaction_memory.first_pass``):
   the peak of the recovery and the pass together.

    python bench/overload_memory.py [--total-mib 1024] [--clients 4] [--append-mib 1]
        [--budget-mib 512] [--server-args ...] [--compaction] [--before REV]

``--before REV``: the same burst first runs against the server code of git revision ``REV``
(its ``server/`` from ``git archive``, first on ``PYTHONPATH``): its numbers are the table's
comparison column. The record goes to ``bench/results/scratch/overload_memory.json``.

``burst`` and ``RssSampler`` are also what ``tests/server/test_overload.py`` runs, smaller.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import shlex
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from procfs import status_kib

MIB = 1024 * 1024
OCTETS = {"Content-Type": "application/octet-stream"}
REFUSALS = (429, 503)
SETTLE_S = 20.0
ID = struct.Struct(">II")
"""The first bytes of each append: its client and its index (the read-back checks both)."""


class RssSampler:
    """VmRSS of a process every ``interval_s`` (a thread) and its VmHWM on demand."""

    def __init__(self, pid: int, interval_s: float = 0.1) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.samples: list[tuple[float, int]] = []
        """(perf_counter, VmRSS in bytes)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.perf_counter(), self.rss()))
            except (OSError, RuntimeError):
                return  # (the process is gone)
            self._stop.wait(self.interval_s)

    def rss(self) -> int:
        return status_kib(self.pid, "VmRSS") * 1024

    def hwm(self) -> int:
        """The largest RSS the process has had since it started."""
        return status_kib(self.pid, "VmHWM") * 1024

    def peak_between(self, start: float, end: float) -> int:
        return max((rss for at, rss in self.samples if start <= at <= end), default=0)


@dataclass
class Ack:
    client: int
    index: int
    digest: bytes
    next_offset: str


@dataclass
class Burst:
    acks: list[list[Ack]]
    """Per client, in the order acknowledged."""
    refusals: Counter[int] = field(default_factory=Counter)
    """Refusals (503, 429) with a ``Retry-After``, by status."""
    bad_refusals: int = 0
    """Refusals without a ``Retry-After``."""
    errors: list[str] = field(default_factory=list)
    """Other answers and closed connections (an append then may or may not be stored)."""
    started: float = 0.0
    ended: float = 0.0

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    @property
    def appends(self) -> int:
        return sum(map(len, self.acks))


def body(client: int, index: int, size: int) -> bytes:
    """An append: its id, then random (incompressible) bytes."""
    return ID.pack(client, index) + os.urandom(size - ID.size)


def burst(
    port: int, paths: list[str], appends: int, size: int, *, timeout_s: float = 600.0, pause_s: float = 0.0
) -> Burst:
    """Each path's client posts ``appends`` appends of ``size`` bytes as fast as it goes (after each,
    ``pause_s``), honouring refusals (module docstring); the streams must exist."""
    result = Burst([[] for _ in paths])
    lock = threading.Lock()
    deadline = time.monotonic() + timeout_s

    def client(number: int, path: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            for index in range(appends):
                data = body(number, index, size)
                while True:
                    if time.monotonic() > deadline:
                        with lock:
                            result.errors.append(f"client {number}: not done within {timeout_s:g} s")
                        return
                    try:
                        conn.request("POST", path, body=data, headers=OCTETS)
                        response = conn.getresponse()
                        answer = response.read()
                    except (OSError, http.client.HTTPException) as error:
                        with lock:
                            result.errors.append(f"client {number}, append {index}: {error!r}")
                        return
                    if response.status in (200, 204):
                        offset = response.getheader("Stream-Next-Offset") or ""
                        result.acks[number].append(Ack(number, index, hashlib.sha1(data).digest(), offset))
                        if pause_s:
                            time.sleep(pause_s)
                        break
                    retry_after = response.getheader("Retry-After")
                    if response.status not in REFUSALS:
                        with lock:
                            result.errors.append(f"client {number}, append {index}: {response.status} {answer[:200]!r}")
                        return
                    with lock:
                        if retry_after is None:
                            result.bad_refusals += 1
                        else:
                            result.refusals[response.status] += 1
                    time.sleep(float(retry_after or 1))
                    if response.getheader("Connection", "").lower() == "close":
                        conn.close()
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(number, path)) for number, path in enumerate(paths)]
    result.started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.ended = time.perf_counter()
    return result


def read_back(port: int, path: str, size: int) -> list[bytes]:
    """Every message of an octet stream of ``size``-byte appends, in order (one read: many messages)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    data = bytearray()
    offset = "-1"
    try:
        while True:
            conn.request("GET", f"{path}?offset={offset}")
            response = conn.getresponse()
            chunk = response.read()
            assert response.status == 200, (response.status, chunk[:200])
            data += chunk
            offset = response.getheader("Stream-Next-Offset") or ""
            if response.getheader("Stream-Up-To-Date") == "true":
                break
    finally:
        conn.close()
    assert len(data) % size == 0, (path, len(data), size)
    return [bytes(data[start : start + size]) for start in range(0, len(data), size)]


# -- the benchmark ---------------------------------------------------------------------------


def run_burst(probe: object, args: argparse.Namespace, name: str, server_args: list[str]) -> dict[str, float]:
    """Steps 1-3 against one started ``scale_probe.Probe``."""
    from compaction_memory import first_pass
    from scale_probe import Probe, note

    assert isinstance(probe, Probe)
    paths = [f"/v1/stream/overload-{index}" for index in range(args.clients)]
    for path in paths:
        probe.create(path)
    size = int(args.append_mib * MIB)
    appends = -(-args.total_mib * MIB // (size * args.clients))
    idle = probe.rss_mib()
    with RssSampler(probe.pid) as sampler:
        done = burst(probe.port, paths, appends, size)
        peak = sampler.hwm()
        time.sleep(SETTLE_S)
        after = sampler.rss()
        settle_peak = sampler.peak_between(done.ended, done.ended + SETTLE_S)
        bar = args.budget_mib * MIB if args.budget_mib == 512 else idle * MIB + args.budget_mib * MIB
        under_s = next((at - done.ended for at, rss in sampler.samples if at > done.ended and rss <= bar), None)
    if done.errors:
        raise RuntimeError(f"{name}: {len(done.errors)} errors, the first: {done.errors[0]}")
    mib = done.appends * size / MIB
    note(
        f"{name}: {done.appends} appends ({mib:,.0f} MiB) in {done.seconds:.1f} s, refusals {dict(done.refusals)} "
        f"(+{done.bad_refusals} without Retry-After); RSS idle {idle:,.0f} MiB, peak {peak / MIB:,.0f} MiB, "
        f"{after / MIB:,.0f} MiB {SETTLE_S:g} s after"
    )
    measured = {
        "idle_rss": idle,
        "peak_rss": peak / MIB,
        "after_rss": after / MIB,
        "settle_peak": settle_peak / MIB,
        "under_s": under_s if under_s is not None else float("nan"),
        "appends_s": done.appends / done.seconds,
        "mib_s": mib / done.seconds,
        "refusals": float(sum(done.refusals.values())),
        "bad_refusals": float(done.bad_refusals),
    }
    if args.compaction:
        again = burst(probe.port, paths, appends, size)
        unflushed = probe.metric("durable_streams_unflushed_bytes") / MIB
        probe.kill()
        note(f"{name}: a second burst ({again.seconds:.1f} s), killed at its end, {unflushed:,.0f} MiB not in Delta")
        measured["unflushed_at_kill"] = unflushed
        passed = first_pass(probe, server_args, f"{name}, after kill -9")
        measured["compaction_peak"] = passed["peak"]
        measured["compaction_ready"] = passed["ready_rss"]
    return measured


def main() -> None:
    from benchkit import Result, report, value_at_most
    from compaction_memory import checkout
    from scale_probe import Work

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-mib", type=int, default=1024)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--append-mib", type=float, default=1.0)
    parser.add_argument("--server-args", default="", help="flags added to the defaults")
    parser.add_argument("--budget-mib", type=int, default=512, help="the server's --memory-budget (default: 512)")
    parser.add_argument("--compaction", action="store_true", help="also kill -9, restart and compact (step 3)")
    parser.add_argument("--before", help="also run the burst against the server code of this git revision")
    args = parser.parse_args()
    settings = vars(args).copy()
    before_rev = settings.pop("before")
    server_args = shlex.split(args.server_args)
    if args.budget_mib != 512:
        server_args += ["--memory-budget", str(args.budget_mib * MIB)]
    work = Work()
    before: dict[str, float] | None = None
    try:
        if before_rev:
            settings["before"] = checkout(before_rev, work.root / "before-code")
            other = work.probe("before", server_args)
            other.process.env = {"PYTHONPATH": str(work.root / "before-code" / "server")}
            other.start()
            before = run_burst(other, args, f"code of {before_rev}", server_args)
            work.done(other)
        probe = work.probe("this", server_args)
        probe.start()
        done = run_burst(probe, args, "this code", server_args)
    finally:
        work.close()
    budget = args.budget_mib
    label = f"{args.total_mib:,} MiB of {args.append_mib:g} MiB appends from {args.clients} clients"

    def row(name: str, key: str, target: float | None = None) -> Result:
        other = before.get(key) if before else None
        bar = target is not None and budget == 512  # (the bar is for the default budget, absolute RSS)
        return Result(f"{label}: {name}", done[key], other, value_at_most(target) if bar else None)

    rows = [
        row("peak RSS MiB (VmHWM)", "peak_rss", 1.5 * budget),
        row(f"RSS {SETTLE_S:g} s after the burst MiB", "after_rss", budget),
        row("RSS at idle before the burst MiB", "idle_rss"),
        row("s from the burst's end until RSS is under the budget", "under_s"),
        row("appends/s", "appends_s"),
        row("MiB/s acknowledged", "mib_s"),
        row("refusals (503/429 with Retry-After)", "refusals"),
        row("refusals without Retry-After", "bad_refusals"),
    ]
    if args.compaction:
        rows.append(row("MiB not in Delta at the kill -9 (a second burst's end)", "unflushed_at_kill"))
        rows.append(row("restart after kill -9 (WAL replay + first compaction pass): peak RSS MiB", "compaction_peak"))
        rows.append(row("RSS when ready after kill -9 (WAL replayed) MiB", "compaction_ready"))
    report(
        "overload_memory",
        None,
        "Overload memory: 4 clients writing 1 MiB appends as fast as they go",
        f"code of {before_rev}" if before_rev else "-",
        rows,
        settings,
        kind="a burst of large appends against a server with default options (loopback, 2 cores shared)",
        work_dir=work.root,
    )


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
