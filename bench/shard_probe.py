"""What worker processes owning shards of streams could gain on this machine: an upper bound.

Runs 32 clients appending 100 B to 32 streams (``server_bench``'s ``conc32`` load) against one
server process, then against ``--processes`` independent server processes (each with its own
data directory, each getting an equal share of the streams and clients): sharding with no
dispatch cost at all, the best a multi-process server could do here. The two setups alternate
``--rounds`` times, since the machine's load moves during a run.

    python bench/shard_probe.py [--processes 2] [--seconds 6] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import tempfile
import uuid
from pathlib import Path

import harness
import server_bench as sb
from benchkit import progress
from servers import ServerProcess

CLIENTS = 32


def _appends_per_s(servers: list[harness.Server], seconds: float) -> float:
    """32 clients on 32 streams spread evenly over ``servers``; total appends/s."""
    work: list[tuple[int, list[str], float]] = []
    per_server = harness.PROCESSES // len(servers) or 1
    for server in servers:
        paths = [f"/v1/stream/shard-{uuid.uuid4().hex}" for _ in range(CLIENTS // len(servers))]
        for path in paths:
            harness.create(server, path)
        work += [(server.port, paths[i::per_server], seconds) for i in range(per_server)]
    return float(sum(harness.spawn(sb._append_worker, work))) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=2, help="server processes of the sharded setup")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each load")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two setups")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ds-shards-"))
    with contextlib.ExitStack() as running:
        started = []
        for index in range(args.processes):
            process = ServerProcess(work / f"shard-{index}").start()
            running.callback(process.kill)
            assert process.proc is not None
            started.append(harness.Server(f"shard-{index}", process.port, process.proc.pid))
        one, sharded = [], []
        for round_ in range(args.rounds):
            one.append(_appends_per_s(started[:1], args.seconds))
            sharded.append(_appends_per_s(started, args.seconds))
            summary = f"one process {one[-1]:,.0f}/s, {args.processes} processes {sharded[-1]:,.0f}/s"
            progress(f"round {round_ + 1}: {summary}")
    shutil.rmtree(work, ignore_errors=True)
    best_one, best_sharded = max(one), max(sharded)
    print(f"\n| setup | best appends/s | ratio |\n|---|---:|---:|\n| one process | {best_one:,.0f} | 1.00x |")
    print(f"| {args.processes} processes, streams sharded | {best_sharded:,.0f} | {best_sharded / best_one:.2f}x |")


if __name__ == "__main__":
    main()
