"""The one-reader wake split into its legs, client's and server's, on one clock.

``wake_timeline.py`` times the steps inside the server; the bench's ``lp1`` row times the
client's whole wait. This puts both on ``time.perf_counter()`` (``CLOCK_MONOTONIC``: one
clock for every process here) and splits each wake into: the client's ``send`` of the append;
from there to the server's ``data_received`` of it; the server's work before the WAL write,
the write and sync, its work after it until the reader's answer is written; from that write
until the client's ``select`` returns; the client's reading of the answer. Our server runs in
this process (``tests/inprocess.serving``: the CLI's protocol class and loop), the client in
another, with the bench's pattern: park a long-poll at the tail, wait 50 ms, append 100 B.

    python bench/wake_split.py [--rounds 60] [--source DIR]

``--source`` runs a server from another checkout (``git archive <commit> | tar -x -C DIR``).
Medians over the rounds (the first five left out). Where the client waits on a leg that the
server's process cannot shorten, it shows here.
"""

from __future__ import annotations

import argparse
import multiprocessing
import selectors
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
_SKIP = 5


def _client(port: int, rounds: int) -> list[tuple[float, float, float, float]]:
    """The ``lp1`` pattern; per round: before the append's ``send``, after it, when ``select``
    returned with the reader's answer, when the answer was read whole."""
    import loadgen
    from harness import Server, create
    from server_bench import OCTETS, PAYLOAD

    path = f"/v1/stream/split-{uuid.uuid4().hex}"
    create(Server("ours", port, 0), path)
    writer, reader = loadgen.Connection(port), loadgen.Connection(port)
    append = loadgen.render("POST", path, port, PAYLOAD, OCTETS)
    seen = []
    for _ in range(rounds):
        tail = writer.request("HEAD", path).headers["stream-next-offset"]
        reader.send(loadgen.render("GET", f"{path}?offset={tail}&live=long-poll", port))
        time.sleep(0.05)  # (parked)
        sent_at = time.perf_counter()
        writer.send(append)
        sent = time.perf_counter()
        with selectors.DefaultSelector() as selector:
            selector.register(reader._sock, selectors.EVENT_READ)
            selector.select(30)
        woke = time.perf_counter()
        (arrived, answer), (_, written) = loadgen.arrivals([reader, writer])
        assert answer.status == 200 and written.status == 204, (answer.status, written.status)
        seen.append((sent_at, sent, woke, arrived))
    writer.close()
    reader.close()
    return seen


def _instrument(stamps: list[tuple[str, float]]) -> None:
    """Stamp the append's arrival, the WAL write's start and end, and each lean answer's write."""
    from durable_streams_server.http.fastpath.cycle import FastCycle as DirectCycle
    from durable_streams_server.http.fastpath.protocol import FastPathProtocol as GuardedHttpToolsProtocol
    from durable_streams_server.storage.wal import WriteAheadLog

    received = GuardedHttpToolsProtocol.data_received
    write = WriteAheadLog.write
    name = "_send" if hasattr(DirectCycle, "_send") else "_write"  # (older checkouts: before rendering)
    send = getattr(DirectCycle, name)

    def data_received(self: Any, data: bytes) -> None:
        if data.startswith(b"POST"):
            stamps.append(("post", time.perf_counter()))
        received(self, data)

    def wal_write(self: Any, frames: list[bytes]) -> None:
        stamps.append(("sync", time.perf_counter()))
        write(self, frames)
        stamps.append(("synced", time.perf_counter()))

    def answer(self: Any, *args: Any, **kwargs: Any) -> None:
        stamps.append(("answer", time.perf_counter()))  # (the transport's write follows at once)
        send(self, *args, **kwargs)

    GuardedHttpToolsProtocol.data_received = data_received  # type: ignore[method-assign]
    WriteAheadLog.write = wal_write  # type: ignore[method-assign]
    setattr(DirectCycle, name, answer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--source", type=Path, default=REPO, help="the checkout whose server runs")
    args = parser.parse_args()
    sys.path[:0] = [str(args.source / "server"), str(REPO / "tests"), str(REPO / "bench")]
    from inprocess import serving

    from durable_streams_server import ServerConfig

    stamps: list[tuple[str, float]] = []
    _instrument(stamps)
    with (
        tempfile.TemporaryDirectory(prefix="ds-split-") as work,
        serving(ServerConfig(data_dir=Path(work))) as (url, _),
        multiprocessing.get_context("spawn").Pool(1) as pool,
    ):
        seen = pool.apply(_client, (int(url.rsplit(":", 1)[1]), args.rounds))
    legs: dict[str, list[float]] = {}
    posts = [index for index, (label, _) in enumerate(stamps) if label == "post"]
    for (sent_at, sent, woke, arrived), at in list(zip(seen, posts, strict=True))[_SKIP:]:
        labels = [label for label, _ in stamps[at : at + 4]]
        if labels != ["post", "sync", "synced", "answer"]:
            continue  # (the writer task wrote this one: not the path measured here)
        post, sync, synced, answer = (stamp for _, stamp in stamps[at : at + 4])
        for leg, seconds in (
            ("client: send", sent - sent_at),
            ("client's send -> server's data_received", post - sent_at),
            ("server: before the WAL write", sync - post),
            ("server: WAL write + sync", synced - sync),
            ("server: after it, to the reader's answer", answer - synced),
            ("the answer's write -> client's select returns", woke - answer),
            ("client: reading the answer", arrived - woke),
            ("total (what lp1 times)", arrived - sent_at),
        ):
            legs.setdefault(leg, []).append(seconds)
    count = len(next(iter(legs.values()), []))
    print(f"{args.source}: {count} wakes (of {args.rounds}; medians, µs)")
    for leg, values in legs.items():
        print(f"  {1e6 * statistics.median(values):7.0f}  {leg}")


if __name__ == "__main__":
    main()
