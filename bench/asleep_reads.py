"""Reads of sleeping streams' recent messages: from memory or from Delta.

A server with ``--idle-stream-s 1`` (streams unused for a second go to sleep, as a busy server
puts them to sleep under load: ``engine/idle.py``) and ``--streams`` text streams. Each round
waits ``--wait`` seconds (the streams asleep), appends one 100-byte message to each (appends
to sleeping streams: ``engine/cold_appends.py``), waits again (the records in Delta, the
streams asleep again), and reads each stream whole (``GET offset=-1``, one keep-alive
connection): the p50 and p90 of those reads. Round 1 reads streams the appends found asleep
since their creation; later rounds, streams that were built by the last round's reads and
went back to sleep with their cached tails. Each checkout runs a server of its own, in turn,
per round, so that a comparison is made under the same conditions.

    python bench/asleep_reads.py DIR [DIR ...] [--rounds 3] [--streams 200] [--wait 4]

``DIR``: a checkout (``git archive <commit> | tar -x -C DIR``; ``.`` is this one).
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path += [str(REPO / "tests"), str(REPO / "tests" / "conformance")]

from benchkit import progress  # noqa: E402
from harness import request  # noqa: E402
from server_bench import create_all  # noqa: E402
from servers import ServerProcess  # noqa: E402

TEXT = {"Content-Type": "text/plain"}
MESSAGE = b"m" * 100


def _reads(source: Path, streams: int, wait_s: float, rounds: int) -> list[tuple[float, float]]:
    """Each round's p50 and p90 ms of a read of each stream, on a server of ``source``."""
    env = {"PYTHONPATH": str(source / "server")}
    with tempfile.TemporaryDirectory(prefix="ds-asleep-reads-") as work:
        server = ServerProcess(Path(work) / "data", extra_args=["--idle-stream-s", "1"], env=env).start()
        names = [f"asleep-{index:05d}" for index in range(streams)]
        create_all(server.port, names)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        seen = []
        try:
            for round_ in range(rounds):
                time.sleep(wait_s)
                for name in names:
                    status, _, _ = request(conn, "POST", f"/v1/stream/{name}", MESSAGE, TEXT)
                    assert status == 204, status
                time.sleep(wait_s)
                took = []
                for name in names:
                    started = time.perf_counter()
                    status, _, body = request(conn, "GET", f"/v1/stream/{name}?offset=-1")
                    took.append((time.perf_counter() - started) * 1000)
                    assert status == 200 and body == MESSAGE * (round_ + 1), (status, len(body))
                took.sort()
                seen.append((statistics.median(took), took[int(len(took) * 0.9)]))
        finally:
            conn.close()
            server.stop()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", type=Path, nargs="+", metavar="DIR")
    parser.add_argument("--rounds", type=int, default=3, help="append-then-read rounds per server")
    parser.add_argument("--runs", type=int, default=2, help="servers per checkout, in turn")
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--wait", type=float, default=4.0, help="seconds before the appends and before the reads")
    args = parser.parse_args()
    seen: dict[Path, list[list[tuple[float, float]]]] = {source: [] for source in args.sources}
    for run in range(args.runs):
        for source in args.sources:
            progress(f"run {run + 1}: {source}")
            rounds = _reads(source.resolve(), args.streams, args.wait, args.rounds)
            seen[source].append(rounds)
            print(
                f"run {run + 1}, {source}: "
                + "; ".join(f"round {n + 1} p50 {p50:.2f} ms, p90 {p90:.2f}" for n, (p50, p90) in enumerate(rounds)),
                flush=True,
            )
    for source, runs in seen.items():
        first = [rounds[0][0] for rounds in runs]
        later = [p50 for rounds in runs for p50, _ in rounds[1:]]
        print(
            f"{source}: read p50 {min(first):.2f}-{max(first):.2f} ms in round 1"
            + (f", {min(later):.2f}-{max(later):.2f} ms in later rounds" if later else "")
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
