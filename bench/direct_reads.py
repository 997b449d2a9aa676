"""Helpers of the direct-history-read rows of ``spark_bench.py``.

``wait_in_delta`` waits until a stream's whole history is in Delta
(the read plan's ``delta_end`` is the tail), so the read measured is all history.
``interleaved`` times several reads round after round (each once per round, the order turned
by one each round, after an untimed round), so that the load of a shared machine falls on all of them alike: their
ratios are measured in the same moments, not minutes apart. ``pooled`` joins the runs of several
sessions' rounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import requests
from benchkit import progress
from procfs import cpu_s

PLAN = {"Accept": "application/vnd.durable-streams.read-plan+json"}


def wait_in_delta(url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    with requests.Session() as http:
        http.trust_env = False
        while time.monotonic() < deadline:
            plan = http.get(url, params={"offset": "-1"}, headers=PLAN, timeout=30).json()
            if plan["delta_end"] == plan["end"]:
                return
            time.sleep(0.2)
    raise RuntimeError(f"{url}: history not all in Delta within {timeout_s}s")


@dataclass
class Timed:
    """One read's runs: seconds each, and the server's CPU seconds during each."""

    seconds: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)

    def best_rate(self, rows: int) -> float:
        return rows / min(self.seconds)

    def cpu_of_best(self) -> float:
        return self.server_cpu[self.seconds.index(min(self.seconds))]

    def median_s(self) -> float:
        ordered = sorted(self.seconds)
        return ordered[len(ordered) // 2]


def pooled(sessions: list[dict[str, Timed]]) -> dict[str, Timed]:
    """The runs of each read over several sessions (``interleaved`` once in each), one list per read."""
    return {
        label: Timed(
            [s for session in sessions for s in session[label].seconds],
            [c for session in sessions for c in session[label].server_cpu],
        )
        for label in sessions[0]
    }


def interleaved(reads: dict[str, Callable[[], None]], rows: int, repeat: int, server_pid: int) -> dict[str, Timed]:
    """``repeat`` rounds, each running every read once; each round starts one read later (the
    place in a round seemed to matter on the shared machine, unproven), so that over
    ``len(reads)`` rounds every read takes every place once.

    One untimed round first, every read at full size, so that the JVM and the Python workers
    are warmed for every read alike.
    The ratio of the direct read to the in-memory source still moves from 0.86x to 1.19x
    between runs and harnesses on a quiet machine, and a Spark session (its JVM) can move it:
    ``spark_bench`` runs these rounds in several sessions and pools them."""
    timed = {label: Timed() for label in reads}
    labels = list(reads)
    for label in labels:
        started = time.perf_counter()
        reads[label]()
        progress(f"  {label}: warm-up, {rows:,} rows in {time.perf_counter() - started:.2f}s (not timed)")
    for round_ in range(repeat):
        turn = round_ % len(labels)
        for label in labels[turn:] + labels[:turn]:
            read = reads[label]
            cpu, started = cpu_s(server_pid), time.perf_counter()
            read()
            elapsed, cost = time.perf_counter() - started, cpu_s(server_pid) - cpu
            timed[label].seconds.append(elapsed)
            timed[label].server_cpu.append(cost)
            progress(
                f"  {label}: {rows:,} rows in {elapsed:.2f}s = {rows / elapsed:,.0f} rows/s, server CPU {cost:.2f}s "
                f"(round {round_ + 1}/{repeat})"
            )
    for label, runs in timed.items():
        progress(f"  {label}: best {min(runs.seconds):.2f}s, median {runs.median_s():.2f}s of {repeat}")
    return timed
