"""What a lone record's sync costs beyond the sync itself: the WAL writer alone, in-process.

One record at a time is queued on a real ``WalWriter`` (its own ``WriteAheadLog``, a real
``Acknowledgements``, uvloop), the loop keeps busy ``--work-us`` (what a request does after
submitting its record: applying it, its answer) and takes one turn, and the record is
awaited until durable; the p50 and mean of queue-to-durable are
printed. On a memory file system (``--dir /dev/shm``, the default) the sync itself is nearly
free, so what is left is where the sync runs and how the loop hears of it: for a checkout
that syncs a lone record on the loop's thread, nothing; for one that hands it to a thread,
the hand-off there and back. Each checkout runs in a fresh interpreter, alternating, per round.

    python bench/sync_handoff.py DIR [DIR ...] [--rounds 3] [--records 3000] [--dir /dev/shm] [--work-us 0]

``DIR``: a checkout (``git archive <commit> | tar -x -C DIR``; ``.`` is this one).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

_CHILD = """
import asyncio, statistics, sys, tempfile, time
from pathlib import Path
import uvloop
from durable_streams_server.storage.acks import Acknowledgements
from durable_streams_server.storage.records import AppendHeader, Record, encode
from durable_streams_server.storage.wal import WriteAheadLog
from durable_streams_server.storage.wal_writer import WalWriter

async def main(records, where, work_s):
    acks = Acknowledgements()
    writer = WalWriter(WriteAheadLog(Path(tempfile.mkdtemp(dir=where)) / "wal"), acks, print)
    writer.recovered(0)
    task = asyncio.create_task(writer.run())
    took = []
    for _ in range(records):
        lsn = acks.stamp()
        frame = encode(Record(lsn, 1, AppendHeader(lsn - 1, 0, None, None, False), (b"x" * 100,)))
        started = time.perf_counter()
        writer.queue(lsn, frame)
        busy_until = time.perf_counter() + work_s
        while time.perf_counter() < busy_until:
            pass
        await asyncio.sleep(0)
        await acks.wait(lsn)
        took.append(time.perf_counter() - started)
    writer.close()
    await task
    took = took[records // 20:]
    print(statistics.median(took), statistics.mean(took))

uvloop.run(main(int(sys.argv[1]), sys.argv[2], float(sys.argv[3])))
"""


def _once(source: Path, records: int, where: str, work_us: float) -> tuple[float, float]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(records), where, str(work_us / 1e6)],
        env={"PYTHONPATH": str(source / "server"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    p50, mean = done.stdout.split()
    return float(p50), float(mean)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", type=Path, nargs="+", metavar="DIR")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--dir", default="/dev/shm", help="where the log is written")
    parser.add_argument("--work-us", type=float, default=0, help="the loop's own work after queueing (busy)")
    args = parser.parse_args()
    seen: dict[Path, list[tuple[float, float]]] = {source: [] for source in args.sources}
    for round_ in range(args.rounds):
        for source in args.sources:
            p50, mean = _once(source.resolve(), args.records, args.dir, args.work_us)
            seen[source].append((p50, mean))
            print(f"round {round_ + 1}, {source}: p50 {p50 * 1e6:.0f} µs, mean {mean * 1e6:.0f} µs", flush=True)
    for source, rows in seen.items():
        p50s = sorted(p50 * 1e6 for p50, _ in rows)
        print(f"{source}: queue-to-durable p50 {statistics.median(p50s):.0f} µs (rounds: {p50s[0]:.0f}-{p50s[-1]:.0f})")


if __name__ == "__main__":
    main()
