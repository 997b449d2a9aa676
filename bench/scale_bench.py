"""Storage scale benchmark: how the server's costs grow with what it stores.

Not a timed test: it prints size -> cost tables, with their targets beside the
measurements, and writes their JSON records like the other benchmarks (``benchkit.report``:
``--sizes full`` runs to ``bench/results/``, others to ``bench/results/scratch/``). The server
is a black box (``scale_probe.py``): a ``durable-streams-server`` subprocess on 127.0.0.1 with a
temp data dir, observed through HTTP, ``/metrics``, ``/proc`` and the data dir on disk, so
the harness keeps working while storage is redesigned. Three groups:

- ``restart``: start-up time (process spawn -> ``/readyz`` 200, median of 3 graceful restarts,
  page cache warm) and the first ``GET offset=-1`` after it, (a) against the number of Delta
  commits of one stream, made by paced 100 B appends (``--flush-interval-ms 5``; each append
  waits for its own commit on ``/metrics``), (b) against the number of bucketed streams,
  created by concurrent ``PUT``s with a 16 B body each. Compaction is off (no checkpoints).
- ``storage``: one stream of N MiB written as 1 MiB random (incompressible) appends. A cold
  catch-up read of it (restart after dropping the page cache), its disk reads per byte
  served (``/proc/PID/io``), and a warm read right after; then the server restarts with a
  3 s compaction interval: pass 1's duration (``/metrics``), peak RSS (VmHWM) and the bytes
  of new Parquet files, and pass 2's new bytes with nothing new stored.
- ``memory``: 500 streams written round-robin in 64 KiB random appends up to each stored
  size, then every stream read whole by 16 clients; RSS and peak RSS after each round.

    python bench/scale_bench.py [--sizes small|full|max] [--only restart,storage,memory]
        [--flushes 1000,5000] [--streams 10000] [--stored-mib 100,1024] [--memory-mib 100]

Progress goes to stderr, the tables to stdout. Explicit sizes or ``--only`` make a partial
record that never replaces a complete one in bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from benchkit import Result, report
from scale_probe import MIB, Work, note, server_flags
from scale_restart import RESTARTS, restart_group
from scale_storage import memory_group, storage_group

SIZES: dict[str, dict[str, list[int]]] = {
    "small": {"flushes": [1000, 2000], "streams": [10_000, 50_000], "stored": [100], "memory": [100, 250]},
    "full": {
        "flushes": [1000, 5000, 20_000],
        "streams": [10_000, 100_000],
        "stored": [100, 1024],
        "memory": [100, 1024, 2048],
    },
    "max": {
        "flushes": [1000, 5000, 20_000],
        "streams": [10_000, 100_000, 300_000],
        "stored": [100, 1024, 2048],
        "memory": [100, 1024, 2048],
    },
}
GROUPS = ("restart", "storage", "memory")


def _sizes(text: str | None, default: list[int]) -> list[int]:
    return default if text is None else sorted(int(part.replace("_", "")) for part in text.split(",") if part.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", choices=sorted(SIZES), default="small", help="size set (default small: minutes)")
    parser.add_argument("--only", help=f"comma-separated groups of {','.join(GROUPS)} (default: all)")
    parser.add_argument("--flushes", help="paced appends to restart after, e.g. 1000,5000,20000")
    parser.add_argument("--streams", help="bucketed stream counts to restart with, e.g. 10000,100000")
    parser.add_argument("--stored-mib", help="stream sizes for catch-up and compaction, e.g. 100,1024")
    parser.add_argument("--memory-mib", help="stored sizes over 500 active streams, e.g. 100,1024,2048")
    parser.add_argument("--memory-budget-mib", type=float, help="pass --memory-budget (bytes) to the server")
    args = parser.parse_args()
    groups = [group.strip() for group in (args.only or ",".join(GROUPS)).split(",") if group.strip()]
    if unknown := sorted(set(groups) - set(GROUPS)):
        parser.error(f"unknown group(s) {', '.join(unknown)}: choose from {', '.join(GROUPS)}")
    if args.memory_budget_mib is not None and "--memory-budget" not in server_flags():
        parser.error("this server has no --memory-budget option")
    preset = SIZES[args.sizes]
    sizes = {
        "flushes": _sizes(args.flushes, preset["flushes"]),
        "streams": _sizes(args.streams, preset["streams"]),
        "stored": _sizes(args.stored_mib, preset["stored"]),
        "memory": _sizes(args.memory_mib, preset["memory"]),
    }
    custom = any(getattr(args, key) for key in ("flushes", "streams", "stored_mib", "memory_mib")) or bool(args.only)
    free = shutil.disk_usage(tempfile.gettempdir()).free / MIB
    note(f"sizes {args.sizes}: {sizes}; {free:,.0f} MiB free in {tempfile.gettempdir()}")
    budget_default = "not given" if "--memory-budget" in server_flags() else "none (the server has no --memory-budget)"
    work = Work()
    runs: dict[str, Callable[[], tuple[list[Result], dict[str, Any]]]] = {
        "restart": lambda: (
            restart_group(work, sizes["flushes"], sizes["streams"]),
            {"flushes": sizes["flushes"], "streams": sizes["streams"], "restarts": f"median of {RESTARTS}"},
        ),
        "storage": lambda: _storage(work, sizes["stored"]),
        "memory": lambda: (
            memory_group(work, sizes["memory"], args.memory_budget_mib),
            {"stored MiB": sizes["memory"], "memory budget MiB": args.memory_budget_mib or budget_default},
        ),
    }
    try:
        for group in groups:
            note(f"group {group}")
            load_before = os.getloadavg()[0]
            results, settings = runs[group]()
            suffix = "" if args.sizes == "full" else f"-{args.sizes}"
            stem = f"scale-{group}{suffix}" + ("-partial" if custom else "")
            load = f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}"
            settings.update(
                {"sizes": args.sizes, "1-min load average before -> after": load, "quick": args.sizes == "small"}
            )
            title = f"Storage scale, {group} (ours only; baseline column: see bench/README.md)"
            kind = f"`--sizes {args.sizes}` run" + (" with explicit sizes" if custom else "")
            report(stem, None if custom else f"scale-{group}", title, "baseline", results, settings, kind)
    finally:
        work.close()


def _storage(work: Work, sizes: list[int]) -> tuple[list[Result], dict[str, Any]]:
    results, dropped = storage_group(work, sizes)
    return results, {"stored MiB": sizes, "page cache dropped before cold reads": dropped}


if __name__ == "__main__":
    main()
