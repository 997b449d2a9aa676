"""Latency before/after: two checkouts of our server, alternating, on the latency loads.

Each round starts the server from one checkout and then the other (``git archive <commit> |
tar -x -C DIR`` makes one; ``.`` is this one), and runs ``server_bench``'s sequential appends
and its one-reader long-poll wake against each; the medians over the rounds are printed per
checkout. Alternating in the same minutes cancels most of what the machine's other load
does to both (a full ``server_bench.py`` run compares against the reference server instead).

    python bench/latency_ab.py BEFORE_DIR AFTER_DIR [MORE_DIRS ...] [--rounds 4] [--appends 2000] [--polls 55]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

import server_bench as sb
from benchkit import progress


def _once(source: Path, work: Path, appends: int, polls: int) -> tuple[float, float, float]:
    """Sequential appends/s and their p50 ms, the long-poll wake p50 ms, for one server start."""
    env = {"PYTHONPATH": f"{source / 'server'}{os.pathsep}{source}"}
    process = sb.ServerProcess(work, [], env=env).start()
    try:
        assert process.proc is not None
        server = sb.Server("ours", process.port, process.proc.pid)
        sequential = sb.sequential_appends(server, appends)
        wake = sb.long_poll_wake(server, 1, polls)
    finally:
        process.kill()
    return sequential["appends/s"], sequential["p50 ms"], wake["p50 ms"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", type=Path, nargs="+", metavar="DIR")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--polls", type=int, default=55)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ds-ab-"))
    seen: dict[Path, list[tuple[float, float, float]]] = {source: [] for source in args.sources}
    try:
        for round_ in range(args.rounds):
            for index, source in enumerate(args.sources):
                rate, p50, wake = _once(source.resolve(), work / f"{round_}-{index}", args.appends, args.polls)
                seen[source].append((rate, p50, wake))
                progress(f"round {round_ + 1}, {source}: {rate:,.0f} appends/s (p50 {p50:.3f} ms), wake {wake:.3f} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for source, rows in seen.items():
        rate, p50, wake = (statistics.median(column) for column in zip(*rows, strict=True))
        print(f"{source}: sequential {rate:,.0f} appends/s, p50 {p50:.3f} ms; long-poll wake p50 {wake:.3f} ms")


if __name__ == "__main__":
    main()
