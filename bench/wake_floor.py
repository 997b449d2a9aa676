"""The machine's floor for the one-reader long-poll wake: the least a server could do.

A bare uvloop protocol in a process of its own answers the bench's ``lp1`` pattern
(``server_bench.long_poll_wake``) with the minimum: a ``HEAD`` gets a fixed tail, a ``GET``
parks its connection, a ``POST`` writes its body to a preallocated file with
``pwritev(..., RWF_DSYNC)`` (as our WAL does), then answers the parked reader and the writer
with fixed bytes. No HTTP parsing beyond finding the head's end, no streams, no records. What
it measures is the loopback, the process wake-ups after the bench's 50 ms idle, and the sync:
what any server on this machine pays before its own work. ``--no-sync`` leaves the sync out (the
reference server does not sync); ``--ours`` alternates each run with the same load on our server
(``ServerProcess``, the CLI's defaults), since the floor moves with the machine's moment as much as we do.

    python bench/wake_floor.py [--runs 3] [--rounds 55] [--no-sync] [--ours]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import statistics
import tempfile
from pathlib import Path
from typing import cast

import uvloop
from server_bench import Server, long_poll_wake
from servers import ServerProcess

_PREALLOCATED = 8 << 20


class _Log:
    """What the server's connections share: the file, where it ends, the parked readers."""

    def __init__(self, fd: int, sync: bool) -> None:
        self.fd = fd
        self.flags = os.RWF_DSYNC if sync else 0
        self.end = 0
        self.parked: list[asyncio.Transport] = []


class _Floor(asyncio.Protocol):
    def __init__(self, log: _Log) -> None:
        self.log = log
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass of asyncio's)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            method = head.split(b" ", 1)[0]
            if method == b"POST":
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                if len(rest) < length:
                    return  # (the rest of the body is still to come)
                body, rest = rest[:length], rest[length:]
                log = self.log
                log.end += os.pwritev(log.fd, [body], log.end, log.flags)
                answer = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nstream-next-offset: 1\r\n\r\n%s" % (length, body)
                for reader in log.parked:
                    reader.write(answer)
                log.parked.clear()
                self.transport.write(b"HTTP/1.1 204 No Content\r\nstream-next-offset: 1\r\n\r\n")
            elif method == b"HEAD":
                self.transport.write(b"HTTP/1.1 200 OK\r\nstream-next-offset: 0\r\ncontent-length: 0\r\n\r\n")
            elif method == b"PUT":
                self.transport.write(b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n")
            else:
                self.log.parked.append(self.transport)
            self.buffer = rest


def _serve(directory: str, ports: multiprocessing.Queue[int], sync: bool) -> None:
    """Serve until killed (``directory``: the parent's, which removes it)."""
    fd = os.open(os.path.join(directory, "log"), os.O_RDWR | os.O_CREAT)
    os.posix_fallocate(fd, 0, _PREALLOCATED)  # (written in place, as the WAL's segment)
    log = _Log(fd, sync)
    loop = uvloop.new_event_loop()
    server = loop.run_until_complete(loop.create_server(lambda: _Floor(log), "127.0.0.1", 0))
    ports.put(server.sockets[0].getsockname()[1])
    loop.run_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=55)
    parser.add_argument("--no-sync", action="store_true", help="write without RWF_DSYNC")
    parser.add_argument("--ours", action="store_true", help="alternate each run with our server")
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    ports: multiprocessing.Queue[int] = context.Queue()
    with contextlib.ExitStack() as running, tempfile.TemporaryDirectory(prefix="ds-floor-") as work:
        process = context.Process(target=_serve, args=(work, ports, not args.no_sync), daemon=True)
        process.start()
        running.callback(process.join, 10)
        running.callback(process.kill)  # (before the join: the callbacks run last first)
        servers = [Server("floor", ports.get(timeout=30), process.pid or 0)]
        if args.ours:
            ours = ServerProcess(Path(work) / "ours").start()
            running.callback(ours.kill)
            assert ours.proc is not None
            servers.append(Server("ours", ours.port, ours.proc.pid))
        seen: dict[str, list[float]] = {server.name: [] for server in servers}
        for run in range(args.runs):
            for server in servers:
                wake = long_poll_wake(server, 1, args.rounds)
                seen[server.name].append(wake["p50 ms"])
                p50, p99 = wake["p50 ms"], wake["p99 ms"]
                print(f"run {run + 1}, {server.name}: long-poll wake p50 {p50:.3f} ms, p99 {p99:.3f} ms")
    for name, values in seen.items():
        print(f"{name}: median of the runs' p50 {statistics.median(values):.3f} ms")


if __name__ == "__main__":
    main()
