"""What a small request costs each server on this machine, beside the least any server could pay.

Three servers answer the same load: a bare uvloop + httptools protocol in a process of its own
(each request's head parsed by httptools, answered with fixed bytes: ``404`` to a ``GET``,
``201`` to a ``PUT``, ``204`` to a ``POST``; no streams, no storage), ours (``ServerProcess``,
the CLI's defaults) and the reference server. The load is the many-streams benchmark's: 32
keep-alive clients in ``PROCESSES`` processes, each sending its next request when its last one
is answered (``loadgen``). Five kinds of request, each server in turn, ``--runs`` times:

- ``GET 404``: reads of 32 streams that do not exist, for ``--seconds``;
- ``create``: ``PUT`` of ``--creates`` new empty streams, after ``--warm-up`` creates not
  measured (the reference's creates start slow and climb: ``streams_scale.py``);
- ``append``: 100-byte appends to 32 streams, for ``--seconds``;
- ``HEAD`` and ``GET offset=-1``: of 32 other streams holding one 100-byte message each, for
  ``--seconds`` each (the bare server answers them ``200``, the ``GET`` with 100 bytes).

Per row: requests/s, and the server's CPU per request (``/proc``: the process; for ours its event
loop's thread too, the thread that holds its rate). The bare server's rows are what the machine,
the loopback and the load generator leave for a server's own work; what a server pays above
them is its own. bench/README.md ("Creates") reads them.

    python bench/http_floor.py [--runs 2] [--seconds 4] [--creates 20000] [--warm-up 50000] [--no-reference]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import multiprocessing
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import httptools
import uvloop

REPO = Path(__file__).resolve().parent.parent
sys.path += [str(REPO / "tests"), str(REPO / "tests" / "conformance")]

import loadgen  # noqa: E402
from benchkit import progress  # noqa: E402
from harness import PROCESSES, Server, create, request, spawn  # noqa: E402
from procfs import cpu_s, main_thread_cpu_s, settle  # noqa: E402
from runner import start_reference_server  # noqa: E402
from server_bench import OCTETS, PAYLOAD, _append_worker, _expect, create_all  # noqa: E402
from servers import ServerProcess  # noqa: E402

_READ_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\nstream-next-offset: 1\r\n"
_READ_ANSWER = _READ_HEAD + b"content-length: 100\r\n\r\n" + b"x" * 100
"""The bare server's answer to a ``GET`` with a query string (the reads of one message)."""
_ANSWERS = {
    b"HEAD": _READ_HEAD + b"content-length: 0\r\n\r\n",
    b"GET": b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
    b"PUT": b"HTTP/1.1 201 Created\r\ncontent-type: text/plain\r\nstream-next-offset: 0\r\ncontent-length: 0\r\n\r\n",
    b"POST": b"HTTP/1.1 204 No Content\r\nstream-next-offset: 1\r\n\r\n",
}


class _Bare(asyncio.Protocol):
    """One connection of the bare server: httptools parses, a fixed answer per method."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass of asyncio's)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_message_complete(self) -> None:
        assert self.transport is not None
        method = self.parser.get_method()
        read = method == b"GET" and b"?" in self.url
        self.transport.write(_READ_ANSWER if read else _ANSWERS.get(method, _ANSWERS[b"GET"]))


def _serve_bare(ports: multiprocessing.Queue[int]) -> None:
    loop = uvloop.new_event_loop()
    server = loop.run_until_complete(loop.create_server(_Bare, "127.0.0.1", 0))
    ports.put(server.sockets[0].getsockname()[1])
    loop.run_forever()


@dataclass
class _Measured:
    server: str
    kind: str
    rate: float
    process_us: float
    loop_us: float | None


def _miss_worker(port: int, paths: list[str], seconds: float) -> int:
    """Reads of ``paths`` (one connection each, none a stream) for ``seconds``; how many got their ``404``."""
    deadline = time.perf_counter() + seconds
    reads = [itertools.repeat(loadgen.render("GET", path, port)) for path in paths]
    return loadgen.drive(port, reads, _expect(404), deadline)


def _read_worker(port: int, paths: list[str], method: str, seconds: float) -> int:
    """``method`` requests of ``paths`` (one connection each; a ``GET`` from ``offset=-1``) for
    ``seconds``; how many got their ``200``."""
    deadline = time.perf_counter() + seconds
    query = "?offset=-1" if method == "GET" else ""
    reads = [itertools.repeat(loadgen.render(method, path + query, port)) for path in paths]
    return loadgen.drive(port, reads, _expect(200), deadline)


def _measured(server: Server, kind: str, loop: bool, work: Callable[[], tuple[int, float]]) -> _Measured:
    """``work()`` (how many requests, in how many seconds) with the server's CPU around it."""
    settle(server.pid)
    process, thread = cpu_s(server.pid), main_thread_cpu_s(server.pid)
    count, seconds = work()
    process, thread = cpu_s(server.pid) - process, main_thread_cpu_s(server.pid) - thread
    return _Measured(server.name, kind, count / seconds, 1e6 * process / count, 1e6 * thread / count if loop else None)


def _rounds(server: Server, streams: list[str], read: list[str], args: argparse.Namespace) -> Iterator[_Measured]:
    loop = server.name == "ours"
    missing = [f"/v1/stream/missing-{index}" for index in range(32)]

    def misses() -> tuple[int, float]:
        counts = spawn(_miss_worker, [(server.port, missing[i::PROCESSES], args.seconds) for i in range(PROCESSES)])
        return sum(counts), args.seconds

    def creates() -> tuple[int, float]:
        names = [f"floor-{uuid.uuid4().hex[:8]}-{index}" for index in range(args.creates)]
        return len(names), create_all(server.port, names)

    def appends() -> tuple[int, float]:
        counts = spawn(_append_worker, [(server.port, streams[i::PROCESSES], args.seconds) for i in range(PROCESSES)])
        return sum(counts), args.seconds

    def reads(method: str) -> Callable[[], tuple[int, float]]:
        def work() -> tuple[int, float]:
            counts = spawn(
                _read_worker, [(server.port, read[i::PROCESSES], method, args.seconds) for i in range(PROCESSES)]
            )
            return sum(counts), args.seconds

        return work

    yield _measured(server, "GET 404", loop, misses)
    yield _measured(server, "create", loop, creates)
    yield _measured(server, "append, 32 streams", loop, appends)
    yield _measured(server, "HEAD, one message", loop, reads("HEAD"))
    yield _measured(server, "GET offset=-1, one 100 B message", loop, reads("GET"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--creates", type=int, default=20_000)
    parser.add_argument("--warm-up", type=int, default=50_000, help="creates not measured, on each server first")
    parser.add_argument("--no-reference", action="store_true")
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    ports: multiprocessing.Queue[int] = context.Queue()
    seen: list[_Measured] = []
    with contextlib.ExitStack() as running, tempfile.TemporaryDirectory(prefix="ds-http-floor-") as work:
        bare = context.Process(target=_serve_bare, args=(ports,), daemon=True)
        bare.start()
        running.callback(bare.join, 10)
        running.callback(bare.kill)  # (before the join: the callbacks run last first)
        servers = [Server("bare", ports.get(timeout=30), bare.pid or 0)]
        ours = ServerProcess(Path(work) / "ours").start()
        running.callback(ours.kill)
        assert ours.proc is not None
        servers.append(Server("ours", ours.port, ours.proc.pid))
        if not args.no_reference:
            reference = start_reference_server(Path(work) / "reference", long_poll_timeout_ms=30_000)
            running.callback(reference.stop)
            servers.append(Server("reference", int(reference.url.rsplit(":", 1)[1]), reference.pid))
        streams: dict[str, list[str]] = {}
        read = [f"/v1/stream/floor-reads-{index}" for index in range(32)]
        for server in servers:
            streams[server.name] = [f"/v1/stream/floor-appends-{index}" for index in range(32)]
            if server.name != "bare":
                progress(f"{server.name}: {args.warm_up:,} creates to warm up")
                create_all(server.port, [f"warm-{index}" for index in range(args.warm_up)])
                for path in streams[server.name]:
                    create(server, path, OCTETS["Content-Type"])
                for path in read:
                    create(server, path, OCTETS["Content-Type"])
                    status, _, _ = request(server.connection(), "POST", path, PAYLOAD, OCTETS)
                    assert status in (200, 204), status
        assert len(PAYLOAD) == 100
        for run in range(args.runs):
            for server in servers:
                for measured in _rounds(server, streams[server.name], read, args):
                    seen.append(measured)
                    loop = "" if measured.loop_us is None else f", its loop {measured.loop_us:.1f} µs"
                    progress(
                        f"run {run + 1}, {server.name}, {measured.kind}: {measured.rate:,.0f}/s, "
                        f"{measured.process_us:.1f} µs of CPU a request{loop}"
                    )
    print("\n| server | request | requests/s (runs) | CPU µs a request, process (runs) | ours: its loop's µs |")
    print("|---|---|---|---|---|")
    for (name, kind), group in itertools.groupby(
        sorted(seen, key=lambda m: ([s.name for s in servers].index(m.server), m.kind)), lambda m: (m.server, m.kind)
    ):
        rows = list(group)
        rates = " / ".join(f"{m.rate:,.0f}" for m in rows)
        cpu = " / ".join(f"{m.process_us:.1f}" for m in rows)
        loops = " / ".join(f"{m.loop_us:.1f}" for m in rows if m.loop_us is not None) or "-"
        median = statistics.median(m.rate for m in rows)
        print(f"| {name} | {kind} | {rates} (median {median:,.0f}) | {cpu} | {loops} |")


if __name__ == "__main__":
    main()
