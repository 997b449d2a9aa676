"""Helpers of the direct-history-read rows of ``spark_bench.py``.

``wait_in_delta`` waits until a stream's whole history is in Delta
(the read plan's ``delta_end`` is the tail), so the read measured is all history.
``interleaved`` times several reads round after round (each once per round, a target row's two
reads trading places every other round, after an untimed round), so that the load of a shared
machine falls on all of them alike: their ratios are measured in the same moments, not minutes
apart. ``pooled`` joins the runs of several sessions' rounds.
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


def interleaved(
    reads: dict[str, Callable[[], None]],
    rows: int,
    repeat: int,
    server_pid: int,
    *,
    pair: tuple[str, str],
    first_round: int = 0,
) -> dict[str, Timed]:
    """``repeat`` rounds, each running every read once in the order given, except that the two
    reads of ``pair`` (a target row's two sides, next to each other in ``reads``) trade places
    every other round, counted from ``first_round``: each then follows the same read as often
    as the other, ±1. Rounds that start one read later, as these did, keep every read's
    predecessor: the target row's two sides always followed the same reads, and a predecessor
    may move a read's time (two sessions of three reads, one order each: the second of two
    reads in the same Python workers ~8% slower; in spark_bench's six-read rounds ~3% or less,
    within what a session moves, bench/README.md).

    One untimed round first, every read at full size, so that the JVM and the Python workers
    are warmed for every read alike. A Spark session (its JVM) can still move the ratio:
    ``spark_bench`` runs these rounds in several sessions and pools them."""
    labels = list(reads)
    at = labels.index(pair[0])
    if labels[at + 1 : at + 2] != [pair[1]]:
        raise ValueError(f"the pair {pair} must be next to each other, in that order, among {labels}")
    swapped = [*labels[:at], pair[1], pair[0], *labels[at + 2 :]]
    timed = {label: Timed() for label in reads}
    for label in labels:
        started = time.perf_counter()
        reads[label]()
        progress(f"  {label}: warm-up, {rows:,} rows in {time.perf_counter() - started:.2f}s (not timed)")
    for round_ in range(repeat):
        for label in swapped if (first_round + round_) % 2 else labels:
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
