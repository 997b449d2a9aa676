"""Side-by-side benchmark: our server against the reference Node server, same load, one run.

Both servers run on this machine at the same time (ours with its defaults: WAL durability,
local Delta storage; the reference ``@durable-streams/server`` with its file-backed store, on
loopback), and every scenario is run against each in turn; the table reports both and the
ratio ours/reference. The long-poll wakes, whose p50s move with the machine's minute by ~20 %,
alternate between the servers in blocks instead (``alternating``), so both are timed in the
same seconds. The numbers are noisy on a shared 2-core machine: read the ratios, not the
absolute values.

    python bench/server_bench.py [--quick] [--only seq,conc1,conc32,catchup,catchupjson,lp1,lp32,sse,memory]

A complete full-size run is a run of record: its JSON record (every row's raw samples, ratio,
target, verdict, and the run's conditions) goes to ``bench/results/server.json``, which
``bench/render.py`` renders into bench/README.md; ``--quick`` and ``--only`` runs go to
``bench/results/scratch/``.

The load generator is ``loadgen``: pre-rendered requests on keep-alive sockets, responses
parsed with the least work (~40 µs of client CPU a request, where ``http.client`` took ~200 µs,
about what a server spends on an append: on 2 cores the load generator's own cost squeezed
every ratio towards 1). Appends and creates run from several processes, each driving its
connections from one thread; long-poll readers are read by one thread as their answers come.
SSE readers and the catch-up read still use ``http.client`` (per byte, not per request).
Latencies across processes compare ``time.monotonic()`` stamps, which on Linux is one
system-wide clock.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path += [str(REPO / "tests"), str(REPO / "tests" / "conformance")]

import loadgen  # noqa: E402
from benchkit import Measured, Result, Target, at_least, at_most, compared, percentile, progress, report  # noqa: E402
from harness import PROCESSES, Server, create, spawn  # noqa: E402
from harness import request as _request  # noqa: E402  (compaction_memory.py imports it from here)
from procfs import rss_mib, settle  # noqa: E402
from runner import start_reference_server  # noqa: E402
from servers import ServerProcess  # noqa: E402
from sse_fan_out import sse_fan_out  # noqa: E402

PAYLOAD = b"x" * 100
OCTETS = {"Content-Type": "application/octet-stream"}
JSON = {"Content-Type": "application/json"}


# -- scenarios ---------------------------------------------------------------------------


def sequential_appends(server: Server, count: int) -> Measured:
    path = f"/v1/stream/seq-{uuid.uuid4().hex}"
    create(server, path)
    conn = loadgen.Connection(server.port)
    append = loadgen.render("POST", path, server.port, PAYLOAD, OCTETS)
    latencies = []
    started = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        conn.send(append)
        status = conn.receive().status
        latencies.append(1000 * (time.perf_counter() - t0))
        assert status == 204, status
    elapsed = time.perf_counter() - started
    conn.close()
    of = f"of {count:,} appends"
    return (
        Measured()
        .add("appends/s", count / elapsed, (count, elapsed), "appends / s (raw: count, s)")
        .add("p50 ms", percentile(latencies, 0.5), latencies, f"p50 {of}")
        .add("p99 ms", percentile(latencies, 0.99), latencies, f"p99 {of}")
    )


def _expect(*statuses: int) -> Callable[[loadgen.Response], None]:
    def check(response: loadgen.Response) -> None:
        assert response.status in statuses, (response.status, response.body[:200])

    return check


def _append_worker(port: int, paths: list[str], seconds: float) -> int:
    """Appends to ``paths`` (one connection each) for ``seconds``; how many were acknowledged."""
    deadline = time.perf_counter() + seconds
    appends = [itertools.repeat(loadgen.render("POST", path, port, PAYLOAD, OCTETS)) for path in paths]
    return loadgen.drive(port, appends, _expect(204), deadline)


def concurrent_appends(server: Server, clients: int, streams: int, seconds: float) -> Measured:
    paths = [f"/v1/stream/conc-{uuid.uuid4().hex}" for _ in range(streams)]
    for path in paths:
        create(server, path)
    per_client = [paths[i % streams] for i in range(clients)]
    counts = spawn(_append_worker, [(server.port, per_client[i::PROCESSES], seconds) for i in range(PROCESSES)])
    how = f"acknowledged appends of {PROCESSES} processes / {seconds:g} s (raw: per process)"
    return Measured().add("appends/s", sum(counts) / seconds, counts, how)


CATCH_UP_ROUNDS = 5


def catch_up_read(
    server: Server, mebibytes: int, rounds: int = CATCH_UP_ROUNDS, *, json_messages: bool = False
) -> Measured:
    """MiB/s of reading a ``mebibytes`` stream from the beginning to the tail, response after
    response: the median of ``rounds`` reads, each of a stream of its own written just before
    (so each read is a first one: for ours, from Delta, not from the history cache). A binary
    stream holds 1 MiB messages; a JSON one (``json_messages``) messages of ~1 KB, appended as
    JSON arrays of 1 MiB, and its MiB are the bytes of the arrays read."""
    speeds = [_catch_up_once(server, mebibytes, json_messages) for _ in range(rounds)]
    how = f"{mebibytes} MiB / s to the tail, median of {rounds} streams (raw: each stream's MiB/s)"
    return Measured().add("MiB/s", statistics.median(speeds), speeds, how)


def _json_chunk() -> bytes:
    """A JSON array of ~1,000 messages of ~1 KB, about 1 MiB (random text: compressed storage
    cannot shrink it)."""
    messages = [{"i": index, "text": os.urandom(500).hex()} for index in range(1_000)]
    return json.dumps(messages, separators=(",", ":")).encode()


def _catch_up_once(server: Server, mebibytes: int, json_messages: bool) -> float:
    path = f"/v1/stream/read-{uuid.uuid4().hex}"
    kind = JSON if json_messages else OCTETS
    create(server, path, kind["Content-Type"])
    conn = server.connection()
    stored = 0
    for _ in range(mebibytes):
        chunk = _json_chunk() if json_messages else b"r" * (1024 * 1024)
        status, _, _ = _request(conn, "POST", path, chunk, kind)
        assert status == 204, status
        stored += len(chunk)
    time.sleep(2)  # past a WAL flush (every second by default): read history at rest, not mid-flush
    received = 0
    offset = "-1"
    started = time.perf_counter()
    while True:
        status, headers, body = _request(conn, "GET", f"{path}?offset={offset}")
        assert status == 200, status
        assert not json_messages or body[:1] + body[-1:] == b"[]", body[:16]
        received += len(body)
        offset = headers["stream-next-offset"]
        if headers.get("stream-up-to-date") == "true":
            break
    elapsed = time.perf_counter() - started
    # (a JSON stream's responses: the same messages, their arrays cut elsewhere)
    assert received == stored if not json_messages else abs(received - stored) < stored // 100, (received, stored)
    conn.close()
    return received / 2**20 / elapsed


def long_poll_wake(server: Server, readers: int, rounds: int, idle_s: float = 0.05) -> Measured:
    """``long_poll_latencies``' p50 and p99 in ms."""
    return latency_summary(long_poll_latencies(server, readers, rounds, idle_s), "wakes")


def latency_summary(latencies: list[float], what: str) -> Measured:
    """p50 and p99 in ms of latencies in seconds (the raw values kept, in ms)."""
    raw = [1000 * latency for latency in latencies]
    of = f"of {len(raw):,} {what}"
    return (
        Measured()
        .add("p50 ms", percentile(raw, 0.5), raw, f"p50 {of}")
        .add("p99 ms", percentile(raw, 0.99), raw, f"p99 {of}")
    )


def long_poll_latencies(
    server: Server, readers: int, rounds: int, idle_s: float = 0.05, warm_up: int = 0
) -> list[float]:
    """``readers`` long-polls parked at the tail; ``idle_s`` later, one append; how long until
    each reader has its response, from the moment the append is sent (all read by one thread
    as they arrive), in seconds; ``warm_up`` more rounds first, not counted."""
    path = f"/v1/stream/lp-{uuid.uuid4().hex}"
    create(server, path)
    writer = loadgen.Connection(server.port)
    append = loadgen.render("POST", path, server.port, PAYLOAD, OCTETS)
    polls = [loadgen.Connection(server.port) for _ in range(readers)]
    latencies: list[float] = []
    for round_ in range(warm_up + rounds):
        tail = writer.request("HEAD", path).headers["stream-next-offset"]
        poll = loadgen.render("GET", f"{path}?offset={tail}&live=long-poll", server.port)
        for conn in polls:
            conn.send(poll)
        time.sleep(idle_s)  # let the requests reach the server and park
        sent_at = time.perf_counter()
        writer.send(append)
        *answers, (_, written) = loadgen.arrivals([*polls, writer])
        assert written.status == 204, written.status
        for arrived, response in answers:
            assert response.status == 200, (response.status, response.body[:200])
            if round_ >= warm_up:
                latencies.append(arrived - sent_at)
    for conn in (*polls, writer):
        conn.close()
    return latencies


def _create_worker(port: int, names: list[str], clients: int) -> tuple[float, float]:
    """Creates ``names`` over ``clients`` connections; when the creating started and ended
    (``time.monotonic``: one clock for all processes)."""
    creates = [
        iter([loadgen.render("PUT", f"/v1/stream/{name}", port, b"", {"Content-Type": "text/plain"}) for name in share])
        for share in (names[i::clients] for i in range(clients))
    ]
    started = time.monotonic()
    loadgen.drive(port, creates, _expect(200, 201))
    return started, time.monotonic()


def create_all(port: int, names: list[str]) -> float:
    """Creates ``names`` from 32 clients (``PROCESSES`` processes, a share of the connections
    each): the seconds from the first create to the last."""
    spans = spawn(_create_worker, [(port, names[i::PROCESSES], 32 // PROCESSES) for i in range(PROCESSES)])
    return max(end for _, end in spans) - min(start for start, _ in spans)


def memory_for_streams(server: Server, streams: int, warm_up: int) -> Measured:
    """Creates/s of ``streams`` empty streams from 32 concurrent clients (from the first create
    to the last), and the server's RSS 2 s later, after ``warm_up`` creates not measured (and
    once the server has gone quiet after them).

    Empty, because the reference server answers ``404`` to some appends (and to creates with a
    body) right after concurrent creates of other streams; one by one it does not, but 10,000
    sequential creates take long. The warm-up, because the reference's creates start slow and climb
    (~1,500-7,000/s over its first 10,000, ~9,000-13,000/s after: ``streams_scale.py``).
    """
    if warm_up:
        warm = create_all(server.port, [f"warm-{uuid.uuid4().hex[:8]}-{index}" for index in range(warm_up)])
        progress(f"  {server.name}: {warm_up:,} creates to warm up in {warm:.2f}s")
        settle(server.pid)  # (what the warm-up left it doing is not to land in the window)
    before = rss_mib(server.pid)
    names = [f"mem-{uuid.uuid4().hex[:8]}-{index}" for index in range(streams)]
    spawned = time.monotonic()
    elapsed = create_all(server.port, names)
    with_start_up = time.monotonic() - spawned
    progress(f"  {server.name}: {streams:,} creates in {elapsed:.2f}s ({with_start_up:.2f}s with start-up)")
    time.sleep(2)  # past a WAL flush (every second by default), so that the flush's memory counts
    after = rss_mib(server.pid)
    return (
        Measured()
        .add("creates/s", streams / elapsed, (streams, elapsed), "creates / s, first to last (raw: count, s)")
        .add("RSS MiB", after, (before, after), "VmRSS 2 s after (raw: before, after)")
        .add("growth MiB", after - before, (before, after), "after - before (raw: before, after)")
    )


# -- the run -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    run: Callable[[Server], Measured] | None
    """The scenario on one server (``None``: a latency scenario, ``alternate``)."""
    targets: dict[str, Target]
    alternate: Callable[[Server], list[float]] | None = None
    """A latency scenario: one block of latencies (seconds) from a server; ``blocks`` of them
    are taken from the servers in turn (``alternating``)."""
    blocks: int = 0
    fresh: bool = False
    """Run on servers started for it (each kind in a directory of its own), not on the ones the
    other scenarios ran on: nothing they left (parked readers, SSE connections, streams) is in it."""


def start_servers(work: Path, running: contextlib.ExitStack) -> list[Server]:
    """Ours and the reference, each with its defaults, stopped when ``running`` closes."""
    ours = ServerProcess(work / "ours").start()
    running.callback(ours.kill)
    reference = start_reference_server(work / "reference", long_poll_timeout_ms=30_000)
    running.callback(reference.stop)
    assert ours.proc is not None
    return [
        Server("ours", ours.port, ours.proc.pid),
        Server("reference", int(reference.url.rsplit(":", 1)[1]), reference.pid),
    ]


def alternating(servers: list[Server], block: Callable[[Server], list[float]], blocks: int) -> dict[str, Measured]:
    """The latency summary per server of ``blocks`` blocks each, taken from the servers in turn
    (ours, reference, reference, ours, ...): both are measured in the same seconds, so that
    the machine's drift from one second to the next, which moves every leg of a wake by ~20 %
    here, does not land in the ratio (a whole row of ours, then the reference's, let it in).
    Each block's first round is a warm-up, not counted, for both: the first wake after the
    other server ran finds the caches the other's."""
    latencies: dict[str, list[float]] = {server.name: [] for server in servers}
    for index in range(blocks):
        for server in servers if index % 2 == 0 else servers[::-1]:
            latencies[server.name] += block(server)
    return {name: latency_summary(values, f"wakes in {blocks} blocks") for name, values in latencies.items()}


def scenarios(scale: float) -> list[Scenario]:
    seconds = 5 * scale + 1
    streams = int(10_000 * scale)
    mebibytes = max(5, int(50 * scale))
    return [
        Scenario(
            "seq",
            "sequential 100 B appends, 1 client",
            lambda s: sequential_appends(s, int(3000 * scale)),
            {"appends/s": at_least(2.5)},
        ),
        Scenario(
            "conc1",
            "32 clients, one stream",
            lambda s: concurrent_appends(s, 32, 1, seconds),
            {"appends/s": at_least(5)},
        ),
        Scenario(
            "conc32",
            "32 clients, 32 streams",
            lambda s: concurrent_appends(s, 32, 32, seconds),
            {"appends/s": at_least(3)},
        ),
        Scenario(
            "catchup",
            f"catch-up read, {mebibytes} MiB binary stream",
            lambda s: catch_up_read(s, mebibytes),
            {"MiB/s": at_least(1.5)},
        ),
        Scenario(
            "catchupjson",
            f"catch-up read, {mebibytes} MiB JSON stream (1 KB messages)",
            lambda s: catch_up_read(s, mebibytes, json_messages=True),
            {},
        ),
        Scenario(
            "lp1",
            "long-poll wake, 1 reader",
            None,
            {"p50 ms": at_most(0.5)},
            alternate=lambda s: long_poll_latencies(s, 1, int(10 * scale) + 1, warm_up=1),
            blocks=5,
        ),
        Scenario(
            "lp32",
            "long-poll wake, 32 readers",
            None,
            {"p50 ms": at_most(0.5)},
            alternate=lambda s: long_poll_latencies(s, 32, int(5 * scale) + 1, warm_up=1),
            blocks=4,
        ),
        Scenario(
            "sse",
            "SSE fan-out, 100 readers on one stream",
            lambda s: sse_fan_out(s, 100, int(50 * scale), 0.1),
            {},
        ),
        Scenario(
            "memory",
            f"{streams:,} streams created (32 clients, after {5 * streams:,} to warm up)",
            lambda s: memory_for_streams(s, streams, 5 * streams),
            {"creates/s": at_least(1.5)},
            fresh=True,
        ),
    ]


def measure(scenario: Scenario, servers: list[Server]) -> dict[str, Measured]:
    """``scenario`` on each of ``servers``: what it measured, by server name."""
    measured: dict[str, Measured] = {}
    if scenario.alternate is not None:
        progress(f"{scenario.title}: both servers, {scenario.blocks} blocks each, in turn")
        measured = alternating(servers, scenario.alternate, scenario.blocks)
    for server in servers:
        if scenario.run is not None:
            progress(f"{scenario.title}: {server.name}")
            measured[server.name] = scenario.run(server)
        summary = ", ".join(f"{metric} {value:,.2f}" for metric, value in measured[server.name].items())
        progress(f"  {server.name}: {summary}")
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a fifth of the loads (a smoke run, never of record)")
    parser.add_argument("--only", help="comma-separated scenario keys (default: all)")
    args = parser.parse_args()
    scale = 0.2 if args.quick else 1.0
    chosen = scenarios(scale)
    keys = [scenario.key for scenario in chosen]
    if args.only:
        wanted = [key.strip() for key in args.only.split(",") if key.strip()]
        unknown = sorted(set(wanted) - set(keys))
        if unknown:
            parser.error(f"unknown scenario(s) {', '.join(unknown)}: choose from {', '.join(keys)}")
        chosen = [scenario for scenario in chosen if scenario.key in wanted]

    work = Path(tempfile.mkdtemp(prefix="ds-bench-"))
    progress(f"starting our server and the reference server (work dir {work}; kept if the run fails)")
    results: list[Result] = []
    with contextlib.ExitStack() as running:
        shared = start_servers(work, running)
        for scenario in chosen:
            with contextlib.ExitStack() as own:
                if scenario.fresh:
                    progress(f"{scenario.title}: starting a server of each kind for it")
                servers = start_servers(work / scenario.key, own) if scenario.fresh else shared
                measured = measure(scenario, servers)
            for metric in measured["ours"]:
                target = scenario.targets.get(metric)
                results.append(
                    compared(f"{scenario.title}: {metric}", measured["ours"], measured["reference"], metric, target)
                )
    complete = len(chosen) == len(keys)
    stem = "server" + ("" if complete else "-" + "-".join(s.key for s in chosen)) + ("-quick" if args.quick else "")
    settings = {"scenarios": "+".join(s.key for s in chosen), "quick": args.quick}
    title = "Server benchmark (ours: WAL durability, local Delta; reference: @durable-streams/server, file-backed)"
    report(stem, "server" if complete else None, title, "reference", results, settings, work_dir=work)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
