"""Server CPU per request: a measure that the machine's other load disturbs much less than rates.

Starts our server alone and runs ``server_bench``'s 32-clients-on-32-streams append load, then
its concurrent stream creation, and divides the server process's CPU time (user + system, from
``/proc/<pid>/stat``: all its threads) by the requests served. ``--source DIR`` runs the server
from another checkout (``git archive <commit> | tar -x -C DIR``) for a before/after comparison
under the same conditions; ``--server-arg`` passes options (e.g. ``--http-parser h11``).

    python bench/cpu_probe.py [--rounds 2] [--seconds 6] [--creates 5000] [--source DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

import server_bench as sb
from benchkit import progress
from procfs import cpu_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=6.0, help="length of the append load")
    parser.add_argument("--creates", type=int, default=5000, help="streams created per round")
    parser.add_argument("--source", type=Path, help="run the server from this checkout instead")
    parser.add_argument("--server-arg", action="append", default=[], help="an option for the server (repeatable)")
    args = parser.parse_args()
    env = {}
    if args.source is not None:
        source = args.source.resolve()
        env["PYTHONPATH"] = f"{source / 'server'}{os.pathsep}{source}"
    work = Path(tempfile.mkdtemp(prefix="ds-cpu-"))
    try:
        for round_ in range(args.rounds):
            process = sb.ServerProcess(work / f"round-{round_}", args.server_arg, env=env).start()
            try:
                assert process.proc is not None
                server = sb.Server("ours", process.port, process.proc.pid)
                before = cpu_s(server.pid)
                rate = sb.concurrent_appends(server, 32, 32, args.seconds)["appends/s"]
                middle = cpu_s(server.pid)
                created = sb.memory_for_streams(server, args.creates, warm_up=0)["creates/s"]
                after = cpu_s(server.pid)
            finally:
                process.kill()
            per_append = 1e6 * (middle - before) / (rate * args.seconds)
            per_create = 1e6 * (after - middle) / args.creates  # (includes the flush of the 2 s after)
            progress(
                f"round {round_ + 1}: {rate:,.0f} appends/s, {per_append:,.0f} µs CPU per append; "
                f"{created:,.0f} creates/s, {per_create:,.0f} µs CPU per create"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
