"""Relayed appends against followed ones, and the router's CPU per relayed append, in one run.

One cluster node on a local directory (``--shards 1``, WAL durability: the cheapest append the
shard server has, so the relay's own cost shows) runs its shard's server as its child. For
each relay under test the node is started afresh and loaded in ``--rounds`` pairs of windows
(follow, then relay: the machine's other load meets both alike), ``--seconds`` each, by
``CLIENTS`` keep-alive connections appending 100 B back to back to ``STREAMS`` streams:

* **follow**: the connections go to the shard's server itself (where a 307 sends a client
  that follows it: ``Durable-Streams-Redirects: follow``);
* **relay**: the connections go to the node without that header: the node relays each append.

Each window records appends/s and the CPU seconds of the node's own process (its router and
supervisor, ``/proc/<pid>/stat``) and of its shard server. The router's CPU per relayed append
is the node's CPU in the relay window less its CPU in the follow window (the supervisor's own
ticks, no requests), over the relayed appends.

Relays under test (``--relays``): ``checkout`` (this checkout's ``cluster.node.proxy``), and ``httpx``
(the relay of ``START_COMMIT``, ``httpx`` per request, read from git and swapped in for the
node's ``Relay`` by this script's ``--node`` mode, which then runs the server's command line as
usual: the node's own code is otherwise the checkout's). ``--profile DIR`` writes each node's cProfile statistics
(the router's thread) to ``DIR/<relay>.pstats`` (``python -m pstats``).

    python bench/relay_bench.py [--seconds 5] [--rounds 2] [--relays httpx,checkout] [--profile DIR]

Prints the runs side by side against the targets (relayed appends/s at least half the
followed ones, at most 0.5 ms of the router's CPU per relayed append) and writes every
window's raw numbers to ``bench/results/scratch/relay.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import loadgen
from benchkit import SCRATCH_DIR, _one_line_numbers, conditions, progress
from procfs import cpu_s
from server_bench import OCTETS, PAYLOAD, REPO

sys.path.append(str(REPO / "tests" / "cluster"))

from cluster_support import Node
from servers import _wait_until_listening, children, free_port, listener_of, wait_for

START_COMMIT = "06273330188685ea6afe45cd20b9dc880c370767"
"""The commit whose relay (``httpx`` per request) is measured as ``httpx``."""
PROXY = "server/durable_streams_server/cluster/proxy.py"
CLIENTS = 32
STREAMS = 8
PROCESSES = 2


def node_main(relay: str, profile: str | None, argv: list[str]) -> None:
    """A cluster node (``durable-streams-server`` with ``argv``) whose router relays with ``relay``."""
    from durable_streams_server import cli
    from durable_streams_server.cluster.node import router

    if relay == "httpx":
        source = subprocess.run(["git", "show", f"{START_COMMIT}:{PROXY}"], cwd=REPO, check=True, capture_output=True)
        module = sys.modules["start_proxy"] = types.ModuleType("start_proxy")
        exec(compile(source.stdout, f"{START_COMMIT[:7]}:{PROXY}", "exec"), module.__dict__)
        httpx_relay = module.Relay

        def relay(read_timeout_s: float, idle_s: float) -> Any:  # (its pool kept idle connections 2 s)
            return httpx_relay(read_timeout_s)

        router.Relay = relay  # type: ignore[assignment,misc]
    if profile is None:
        cli.main(argv)
        return
    profiler = cProfile.Profile()

    def dump(*_: object) -> None:  # (uvicorn raises the SIGTERM it caught again once it has shut down)
        profiler.disable()
        profiler.dump_stats(profile)
        sys.exit(0)

    signal.signal(signal.SIGTERM, dump)
    profiler.runcall(cli.main, argv)


def _appends(port: int, paths: list[str], start_at: float, seconds: float) -> int:
    """Appends to ``paths`` (one connection each) from ``start_at`` (``time.time``) for ``seconds``."""
    time.sleep(max(0.0, start_at - time.time()))
    requests = [itertools.repeat(loadgen.render("POST", path, port, PAYLOAD, OCTETS)) for path in paths]

    def check(response: loadgen.Response) -> None:
        assert response.status == 204, (response.status, response.body[:300])

    return loadgen.drive(port, requests, check, time.perf_counter() + seconds)


def window(port: int, node_pid: int, server_pid: int, paths: list[str], seconds: float) -> dict[str, Any]:
    """One load window: appends/s and the node's and its shard server's CPU seconds meanwhile."""
    start_at = time.time() + 2.0  # (the client processes start meanwhile)
    spread = [paths[index % len(paths)] for index in range(CLIENTS)]
    pending = multiprocessing.get_context("spawn").Pool(PROCESSES)
    try:
        result = pending.starmap_async(
            _appends, [(port, spread[i::PROCESSES], start_at, seconds) for i in range(PROCESSES)]
        )
        time.sleep(max(0.0, start_at - time.time()))
        node_before, server_before, load_before = cpu_s(node_pid), cpu_s(server_pid), os.getloadavg()[0]
        time.sleep(seconds)
        node_cpu, server_cpu = cpu_s(node_pid) - node_before, cpu_s(server_pid) - server_before
        counts = result.get(timeout=seconds + 120)
    finally:
        pending.close()
        pending.join()
    appends = sum(counts)
    return {
        "appends": appends,
        "seconds": seconds,
        "appends_per_s": appends / seconds,
        "node_cpu_s": node_cpu,
        "shard_server_cpu_s": server_cpu,
        "load_average": [load_before, os.getloadavg()[0]],
    }


def measure(relay: str, work: Path, seconds: float, rounds: int, profile: Path | None) -> dict[str, Any]:
    """Start a node relaying with ``relay``, load it (follow, relay, ``rounds`` times), stop it."""
    port = free_port()
    here = work / f"{relay}-{port}"
    argv = ["--cluster", "--node-id", f"n-{relay}", "--port", str(port), "--data-dir", str(here / "node")]
    argv += ["--storage-uri", str(here / "root"), "--shards", "1", "--durability", "wal"]
    command = [sys.executable, __file__, "--node", relay]
    command += ["--profile", str(profile / f"{relay}.pstats")] if profile is not None else []
    here.mkdir(parents=True)
    log = here / "node.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*command, "--", *argv], stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        _wait_until_listening(port, proc, log)
        node = Node(types.SimpleNamespace(url=f"http://127.0.0.1:{port}", proc=proc), f"n-{relay}")  # type: ignore[arg-type]
        wait_for(lambda: node.describe()["shards"][0]["state"] == "serving", timeout_s=120)  # type: ignore[index]
        shard_url = str(node.describe()["shards"][0]["url"])  # type: ignore[index]
        shard_port = int(shard_url.rsplit(":", 1)[1])
        server_pid = listener_of(shard_port, children(proc.pid))  # (a node also keeps a spare, not yet a server)
        if server_pid is None:
            raise RuntimeError(f"none of the node's processes listens on port {shard_port}")
        paths = [f"/v1/stream/relay-{relay}-{index}" for index in range(STREAMS)]
        for path in paths:
            created = loadgen.Connection(shard_port).request("PUT", path, b"", OCTETS)
            assert created.status == 201, created
        follows, relays = [], []
        for _ in range(rounds):  # (alternated: the machine's other load meets both alike)
            follows.append(window(shard_port, proc.pid, server_pid, paths, seconds))
            relays.append(window(port, proc.pid, server_pid, paths, seconds))
    finally:
        proc.terminate()  # (SIGTERM: the node stops its shard server and, profiled, writes its statistics)
        proc.wait(timeout=60)
    follow, relayed = _total(follows), _total(relays)
    router_cpu = max(0.0, relayed["node_cpu_s"] - follow["node_cpu_s"])
    return {
        "relay": relay,
        "follow": follow,
        "relay_window": relayed,
        "windows": {"follow": follows, "relay": relays},
        "relayed_per_followed": relayed["appends_per_s"] / max(1e-9, follow["appends_per_s"]),
        "router_cpu_ms_per_relayed_append": 1000 * router_cpu / max(1, relayed["appends"]),
    }


def _total(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """Windows of one kind together: their appends and CPU summed, appends/s over their seconds."""
    appends = sum(each["appends"] for each in windows)
    return {
        "appends": appends,
        "appends_per_s": appends / sum(each["seconds"] for each in windows),
        "node_cpu_s": sum(each["node_cpu_s"] for each in windows),
        "shard_server_cpu_s": sum(each["shard_server_cpu_s"] for each in windows),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--node":
        relay, rest = sys.argv[2], sys.argv[3:]
        profile = rest[1] if rest[:1] == ["--profile"] else None
        node_main(relay, profile, rest[rest.index("--") + 1 :])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each load window")
    parser.add_argument("--rounds", type=int, default=2, help="follow and relay windows, alternated")
    parser.add_argument(
        "--relays", default="httpx,checkout", help="relays under test: httpx (START_COMMIT's), checkout"
    )
    parser.add_argument("--profile", type=Path, default=None, help="write each node's cProfile statistics here")
    args = parser.parse_args()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ds-relay-"))
    runs = []
    try:
        for relay in args.relays.split(","):
            run = measure(relay, work, args.seconds, args.rounds, args.profile)
            runs.append(run)
            follow, relayed = run["follow"], run["relay_window"]
            progress(
                f"{relay}: followed {follow['appends_per_s']:,.0f}/s, relayed {relayed['appends_per_s']:,.0f}/s "
                f"({run['relayed_per_followed']:.2f}x), router CPU {run['router_cpu_ms_per_relayed_append']:.3f} ms "
                f"per relayed append (node CPU {relayed['node_cpu_s']:.2f} s relayed, {follow['node_cpu_s']:.2f} s not)"
            )
        record = {
            "section": "relay",
            "title": "Relayed against followed appends through one cluster node",
            "of_record": False,
            "conditions": conditions(work),
            "settings": {
                "seconds": args.seconds,
                "rounds": args.rounds,
                "clients": CLIENTS,
                "streams": STREAMS,
                "start_commit": START_COMMIT,
            },
            "runs": runs,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    SCRATCH_DIR.mkdir(parents=True, exist_ok=True)
    path = SCRATCH_DIR / "relay.json"
    path.write_text(_one_line_numbers(json.dumps(record, indent=2)) + "\n")
    print("\n" + table(runs))
    print(f"\nresults: {path}")


def table(runs: list[dict[str, Any]]) -> str:
    """The runs side by side, against the targets (relayed >= 0.5x followed; <= 0.5 ms of router CPU)."""
    lines = [
        "| relay | followed appends/s | relayed appends/s | relayed / followed (>= 0.5) "
        "| router CPU ms per relayed append (<= 0.5) |",
        "|---|--:|--:|--:|--:|",
    ]
    for run in runs:
        ratio, cpu = run["relayed_per_followed"], run["router_cpu_ms_per_relayed_append"]
        lines.append(
            f"| {run['relay']} | {run['follow']['appends_per_s']:,.0f} | {run['relay_window']['appends_per_s']:,.0f} "
            f"| {ratio:.2f} {'met' if ratio >= 0.5 else 'missed'} | {cpu:.3f} {'met' if cpu <= 0.5 else 'missed'} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
