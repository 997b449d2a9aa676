"""Cluster scale: appends through 1, 2 and 3 cluster nodes on one storage root.

For each storage root (moto's S3 server on loopback; a local directory) and durability, one
node is started (``durable-streams-server --cluster``, ``SHARDS`` shards, the default lease
ttl), then a second, then a third, each time until every node holds ``SHARDS / nodes``
shards and every shard is served (``GET /v1/cluster``). The same shard count in every row,
so the rows compare. At each size:

* **idle** (object stores only): the store's requests for ``IDLE_S`` seconds with no load,
  counted from moto's log (one line per request): the lease loop's (``_cluster/``) per node
  against the count its tick makes (``lease_requests_per_tick``), the shard servers' (their
  owner watch refreshing the Delta log) per shard, and the nodes' CPU;
* **follow**: ``CLIENTS`` clients, one per stream (``STREAMS_PER_SHARD`` streams in every
  shard), append 100 B back to back for ``--seconds``, each to its stream's shard server: its
  first append went to a node with ``Durable-Streams-Redirects: follow`` and the 307 named the
  server (what this project's client does);
* **relay**: the same load sent to a node that does not hold the stream's shard, without the
  header: the node relays each append to the shard's server (with one node, the node itself).

Each load records appends/s, the latency of every acknowledged append (p50, p99), the CPU
seconds of each node's process tree (its supervisor and shard servers, ``/proc/<pid>/stat``
utime + stime) and of moto and the clients, the store's requests by kind, each shard
server's Delta commits (``/metrics``) and the load average. The clients run in
``harness.PROCESSES`` processes started once (6 threads each, ``loadgen`` connections); a
barrier starts every process's window at once.

    python bench/cluster_bench.py [--seconds 5] [--storage moto,local] [--durability wal,delta]
        [--nodes 1,2,3] [--paths follow,relay]

The complete default run writes ``bench/results/cluster.json`` (rendered into bench/README.md
by ``bench/render.py``); any other run writes ``bench/results/scratch/cluster.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import harness
import loadgen
from benchkit import RESULTS_DIR, SCRATCH_DIR, _one_line_numbers, conditions, percentile, progress, summary
from procfs import cpu_s
from render import carried_table
from server_bench import OCTETS, PAYLOAD, REPO

sys.path.append(str(REPO / "tests" / "cluster"))

from cluster_support import Node, children, name_in_shard
from servers import MotoServer, ServerProcess, session, wait_for

SHARDS = 6
STREAMS_PER_SHARD = 4
CLIENTS = SHARDS * STREAMS_PER_SHARD
LEASE_TTL_S = 5.0
IDLE_S = 5.0
FOLLOW = {"Durable-Streams-Redirects": "follow"}
BUCKET = "cluster-bench"
_REQUEST = re.compile(r'"(?:\x1b\[[0-9;]*m)?([A-Z]+) (\S+) HTTP/')
Plan = tuple[int, str, dict[str, str]]
"""One client's appends: the port it sends to, the stream's path, extra headers."""
_SHARED: dict[str, Any] = {}
"""What a client process inherits from the pool's initializer (the start barrier)."""


def lease_requests_per_tick(nodes: int, held: int) -> int:
    """A node's store requests per supervisor tick (``node.Supervisor.tick``): its node object
    PUT, the node listing, the other nodes' objects, the leases it does not hold (GET) and those
    it holds (PUT)."""
    return 1 + 1 + (nodes - 1) + (SHARDS - held) + held


# -- clients (in the pool's processes) -----------------------------------------------------


def _init_client(barrier: Any) -> None:
    _SHARED["barrier"] = barrier


def _client_process(plans: list[Plan], seconds: float) -> dict[str, Any]:
    """Appends from one thread per plan (port, path, headers) for ``seconds`` after the
    barrier (connections opened after it: an idle keep-alive connection may be closed by the
    server meanwhile); every acknowledged append's latency (s), each client's count, other
    statuses and connections the server closed."""
    latencies: list[float] = []
    counts = [0] * len(plans)
    statuses: dict[str, int] = {}
    lock = threading.Lock()
    _SHARED["barrier"].wait(timeout=120)
    start = time.monotonic()
    end = start + seconds
    cpu = time.process_time()

    def client(index: int) -> None:
        port, path, headers = plans[index]
        request = loadgen.render("POST", path, port, PAYLOAD, {**OCTETS, **headers})
        conn, mine = loadgen.Connection(port), []
        while (sent := time.monotonic()) < end:
            try:
                conn.send(request)
                response = conn.receive()
            except ConnectionError:  # (counted, then a new connection)
                with lock:
                    statuses["connection closed"] = statuses.get("connection closed", 0) + 1
                conn.close()
                conn = loadgen.Connection(port)
                continue
            done = time.monotonic()
            if response.status != 204:
                with lock:
                    statuses[str(response.status)] = statuses.get(str(response.status), 0) + 1
                time.sleep(0.05)
            elif done <= end:
                mine.append(done - sent)
        conn.close()
        with lock:
            latencies.extend(mine)
            counts[index] = len(mine)

    harness.threads(client, list(range(len(plans))))
    return {"latencies": latencies, "counts": counts, "statuses": statuses, "cpu_s": time.process_time() - cpu}


# -- what the parent observes --------------------------------------------------------------


def tree_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of ``pid`` and each process it started (a node: its shard servers)."""
    found = {}
    for each in [pid, *children(pid)]:
        with contextlib.suppress(OSError):  # (exited meanwhile)
            found[each] = cpu_s(each)
    return found


def store_requests(log: Path | None, start: int, end: int) -> dict[str, int]:
    """moto's requests between two offsets of its log: ``<lease loop|shards> <method|LIST>``."""
    counts: dict[str, int] = {}
    if log is None:
        return counts
    with open(log, "rb") as file:
        file.seek(start)
        text = file.read(end - start).decode("latin-1")
    for method, target in _REQUEST.findall(text):
        target = unquote(target)
        where = "lease loop" if "/_cluster/" in target else "shards"
        kind = "LIST" if "list-type=2" in target else method
        counts[f"{where} {kind}"] = counts.get(f"{where} {kind}", 0) + 1
    return counts


def commits(url: str) -> tuple[float, float]:
    """A shard server's successful Delta commits so far, and their seconds (``/metrics``)."""
    count = seconds = 0.0
    for line in session().get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("durable_streams_delta_commit_duration_seconds_count"):
            count = float(line.split()[-1])
        elif line.startswith("durable_streams_delta_commit_duration_seconds_sum"):
            seconds = float(line.split()[-1])
    return count, seconds


@dataclass
class Snapshot:
    at: float
    nodes: list[dict[int, float]]
    store_cpu: float
    log_offset: int
    load: tuple[float, float, float]


@dataclass
class Cluster:
    """Nodes over one storage root, added one at a time."""

    label: str
    root_args: list[str]
    durability: str
    work: Path
    moto: MotoServer | None
    nodes: list[Node] = field(default_factory=list)

    def add_node(self) -> float:
        """Start one more node; the seconds until the shards are balanced and served."""
        index = len(self.nodes)
        args = ["--cluster", "--node-id", f"n{index}", *self.root_args, "--shards", str(SHARDS)]
        args += ["--durability", self.durability, "--lease-ttl-s", str(LEASE_TTL_S)]
        started = time.monotonic()
        self.nodes.append(Node(ServerProcess(self.work / f"{self.label}-n{index}", args).start(), f"n{index}"))
        wait_for(self.balanced, timeout_s=300, message=lambda: json.dumps([node.describe() for node in self.nodes]))
        return time.monotonic() - started

    def balanced(self) -> bool:
        views = [node.describe() for node in self.nodes]
        share = SHARDS // len(self.nodes)
        return all(
            len(view["held"]) == share and all(shard["state"] == "serving" for shard in view["shards"])
            for view in views
        )

    def shards(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.nodes[0].describe()["shards"]  # type: ignore[assignment]
        return found

    def pids(self) -> list[int]:
        """Each node's process (its supervisor and router; its shard servers are its children)."""
        return [node.process.proc.pid for node in self.nodes if node.process.proc is not None]

    def snapshot(self) -> Snapshot:
        moto = self.moto
        return Snapshot(
            time.monotonic(),
            [tree_cpu(pid) for pid in self.pids()],
            cpu_s(moto.proc.pid) if moto is not None and moto.proc is not None else 0.0,
            moto.log_path.stat().st_size if moto is not None else 0,
            os.getloadavg(),
        )

    def between(self, first: Snapshot, last: Snapshot) -> dict[str, Any]:
        """What the nodes and the store did between two snapshots."""
        node_cpu = [
            sum(after[pid] - cpu for pid, cpu in before.items() if pid in after)  # (a process that exited: not counted)
            for before, after in zip(first.nodes, last.nodes, strict=True)
        ]
        pids = zip(self.pids(), first.nodes, last.nodes, strict=True)
        routers = [after[pid] - before[pid] for pid, before, after in pids]
        return {
            "seconds": last.at - first.at,
            "node_cpu_s": node_cpu,
            "router_cpu_s": routers,
            "store_cpu_s": last.store_cpu - first.store_cpu,
            "store_requests": store_requests(
                self.moto.log_path if self.moto else None, first.log_offset, last.log_offset
            ),
            "load_average": [list(first.load), list(last.load)],
        }

    def kill(self) -> None:
        for node in self.nodes:
            node.process.kill()


# -- the measurements ----------------------------------------------------------------------


def stream_names() -> list[tuple[str, int]]:
    """``STREAMS_PER_SHARD`` streams in every shard: (name, shard)."""
    return [
        (name_in_shard(shard, SHARDS, f"cb{j}"), shard) for j in range(STREAMS_PER_SHARD) for shard in range(SHARDS)
    ]


def follow_plans(cluster: Cluster, names: list[tuple[str, int]]) -> list[Plan]:
    """Each stream's first append to a node (round robin) with the follow header; its 307's server."""
    plans = []
    for index, (name, _) in enumerate(names):
        node = cluster.nodes[index % len(cluster.nodes)]
        conn = loadgen.Connection(node.process.port)
        answer = conn.request("POST", f"/v1/stream/{name}", PAYLOAD, {**OCTETS, **FOLLOW})
        conn.close()
        assert answer.status == 307, answer
        location = urlsplit(answer.headers["location"])
        assert location.port is not None
        plans.append((location.port, location.path, FOLLOW))
    return plans


def relay_plans(cluster: Cluster, names: list[tuple[str, int]]) -> list[Plan]:
    """Each stream's appends to a node that does not hold its shard (the next node after its holder)."""
    holders = [shard["holder"] for shard in cluster.shards()]
    ids = [node.node_id for node in cluster.nodes]
    plans = []
    for name, shard in names:
        node = cluster.nodes[(ids.index(holders[shard]) + 1) % len(ids)]
        plans.append((node.process.port, f"/v1/stream/{name}", {}))
    return plans


def load(cluster: Cluster, pool: Any, barrier: Any, plans: list[Plan], seconds: float) -> dict[str, Any]:
    """One load window: the clients' results with what the cluster did meanwhile."""
    urls = [shard["url"] for shard in cluster.shards()]
    commits_before = [commits(url) for url in urls]
    per_process = [(plans[index :: harness.PROCESSES], seconds) for index in range(harness.PROCESSES)]
    pending = pool.starmap_async(_client_process, per_process, chunksize=1)
    barrier.wait(timeout=120)
    first = cluster.snapshot()
    time.sleep(max(0.0, first.at + seconds - time.monotonic()))
    last = cluster.snapshot()
    results = pending.get(timeout=seconds + 120)
    commits_after = [commits(url) for url in urls]
    latencies = sorted(latency for result in results for latency in result["latencies"])
    appends = len(latencies)
    statuses: dict[str, int] = {}
    for result in results:
        for status, count in result["statuses"].items():
            statuses[status] = statuses.get(status, 0) + count
    return {
        "appends": appends,
        "appends_per_s": appends / seconds,
        "latency_ms_percentiles": [round(1000 * percentile(latencies, q / 100), 3) for q in range(100)]
        + [round(1000 * latencies[-1], 3) if latencies else None],
        "client_appends": [count for result in results for count in result["counts"]],
        "client_cpu_s": sum(result["cpu_s"] for result in results),
        "other_statuses": statuses,
        "delta_commits": [after[0] - before[0] for before, after in zip(commits_before, commits_after, strict=True)],
        "delta_commit_s": [after[1] - before[1] for before, after in zip(commits_before, commits_after, strict=True)],
        **cluster.between(first, last),
    }


def run_root(
    storage: str,
    durability: str,
    work: Path,
    moto: MotoServer | None,
    pool: Any,
    barrier: Any,
    args: argparse.Namespace,
    runs: list[dict[str, Any]],
) -> None:
    """The sizes of one cluster on one storage root, their runs appended to ``runs`` as measured."""
    label = f"{storage}-{durability}"
    if moto is not None:
        root_args = moto.server_args(f"s3://{BUCKET}/{label}")
    else:
        root_args = ["--storage-uri", str(work / f"{label}-root")]
    cluster = Cluster(label, root_args, durability, work, moto)
    names = stream_names()
    balance_s = 0.0
    try:
        for size in args.nodes:
            while len(cluster.nodes) < size:
                balance_s = cluster.add_node()
                progress(f"{label}: {len(cluster.nodes)} node(s) serve {SHARDS} shards after {balance_s:.1f} s")
            if len(cluster.nodes) == 1 and size == args.nodes[0]:
                for name, _ in names:
                    answer = session().put(f"{cluster.nodes[0].url}/v1/stream/{name}", headers=OCTETS, timeout=30)
                    assert answer.status_code in (200, 201), answer.text
            base = {"storage": storage, "durability": durability, "nodes": size, "balance_s": balance_s}
            if moto is not None:
                time.sleep(1.0)  # (a tick or so after the last move)
                first = cluster.snapshot()
                time.sleep(IDLE_S)
                idle = cluster.between(first, cluster.snapshot())
                runs.append({**base, "load": "idle", **idle})
                lease = sum(v for k, v in idle["store_requests"].items() if k.startswith("lease")) / idle["seconds"]
                progress(f"{label}, {size} node(s), idle: {lease / size:.1f} lease-loop requests/s per node")
            for variant in args.paths:
                plans = follow_plans(cluster, names) if variant == "follow" else relay_plans(cluster, names)
                measured = load(cluster, pool, barrier, plans, args.seconds)
                runs.append({**base, "load": variant, **measured})
                p50, p99 = measured["latency_ms_percentiles"][50], measured["latency_ms_percentiles"][99]
                progress(
                    f"{label}, {size} node(s), {variant}: {measured['appends_per_s']:,.0f} appends/s, "
                    f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, load {measured['load_average'][1][0]:.1f}"
                )
    finally:
        cluster.kill()


# -- the tables ----------------------------------------------------------------------------


def _n(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


PATHS = {"follow": "its shard's server (after one 307)", "relay": "a node not holding its shard (relayed)"}


def load_row(run: dict[str, Any]) -> list[str]:
    appends = max(1, run["appends"])
    each = [1e6 * cpu / appends for cpu in run["node_cpu_s"]]
    requests = run["store_requests"]
    lease = sum(count for kind, count in requests.items() if kind.startswith("lease"))
    shards = sum(requests.values()) - lease
    commits_s = sum(run["delta_commits"]) / SHARDS / run["seconds"]
    commit_ms = 1000 * sum(run["delta_commit_s"]) / max(1, sum(run["delta_commits"]))
    path = PATHS[run["load"]] if run["nodes"] > 1 or run["load"] == "follow" else "the node (relayed)"
    start, end = run["load_average"]
    return [
        run["storage"],
        run["durability"],
        path,
        str(run["nodes"]),
        _n(run["appends_per_s"]),
        _n(run["latency_ms_percentiles"][50]),
        _n(run["latency_ms_percentiles"][99]),
        f"{_n(sum(each))} ({' / '.join(_n(value) for value in each)})",
        _n(1e6 * sum(run["router_cpu_s"]) / appends),
        _n(1e6 * run["store_cpu_s"] / appends) if run["storage"] == "moto" else "-",
        _n(1e6 * run["client_cpu_s"] / appends),
        f"{shards / appends:.3f} + {lease / appends:.3f}" if run["storage"] == "moto" else "-",
        f"{commits_s:.2f} ({commit_ms:.0f} ms)",
        f"{start[0]:.1f} → {end[0]:.1f}",
    ]


def idle_row(run: dict[str, Any]) -> list[str]:
    requests, seconds, size = run["store_requests"], run["seconds"], run["nodes"]
    lease = sum(count for kind, count in requests.items() if kind.startswith("lease")) / seconds
    owner = sum(count for kind, count in requests.items() if kind.startswith("shards")) / seconds
    expected = sum(lease_requests_per_tick(size, SHARDS // size) for _ in range(size)) / (LEASE_TTL_S / 5)
    kinds = ", ".join(f"{kind} {count / seconds:.1f}" for kind, count in sorted(requests.items()))
    return [
        run["storage"],
        run["durability"],
        str(size),
        f"{lease / size:.1f} ({expected / size:.0f})",
        f"{owner / SHARDS:.2f}",
        kinds,
        " / ".join(f"{100 * cpu / seconds:.1f}" for cpu in run["node_cpu_s"]),
        f"{run['balance_s']:.0f}",
    ]


def tables(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    loads = [run for run in runs if run["load"] != "idle"]
    idles = [run for run in runs if run["load"] == "idle"]
    return [
        {
            "caption": f"Appends, {CLIENTS} clients on {CLIENTS} streams ({STREAMS_PER_SHARD} in each of {SHARDS} "
            "shards), 100 B each, back to back. CPU µs per append: all nodes' process trees (each node's), of "
            "which the nodes' own processes (supervisor and router), moto's, the clients'; store requests per "
            "append: shard tables + lease loop; Delta commits per second per shard (their mean duration).",
            "columns": [
                "storage",
                "durability",
                "each client sends to",
                "nodes",
                "appends/s",
                "p50 ms",
                "p99 ms",
                "node CPU µs/append (each node)",
                "of which routers",
                "moto CPU µs/append",
                "client CPU µs/append",
                "store requests/append",
                "commits/s per shard",
                "load average",
            ],
            "align": "lllrrrrrrrrrrl",
            "rows": [load_row(run) for run in loads],
        },
        {
            "caption": f"Idle, {IDLE_S:g} s with no load (lease ttl {LEASE_TTL_S:g} s, tick {LEASE_TTL_S / 5:g} s): "
            "the lease loop's requests per node (the count its tick makes), the shard servers' (owner watch) per "
            "shard, every kind per second, each node's CPU, and the seconds from starting the newest node to all "
            "shards served and balanced.",
            "columns": [
                "storage",
                "durability",
                "nodes",
                "lease-loop requests/s per node (by the tick's count)",
                "shard-table requests/s per shard",
                "requests/s by kind",
                "node CPU % at idle (each node)",
                "s to balance",
            ],
            "align": "lllrrlrr",
            "rows": [idle_row(run) for run in idles],
        },
    ]


def write_record(runs: list[dict[str, Any]], settings: dict[str, Any], of_record: bool, work: Path) -> Path:
    record = {
        "section": "cluster",
        "title": f"Cluster scale: 1 to {max(settings['nodes'])} nodes over one storage root, {SHARDS} shards",
        "other": None,
        "of_record": of_record,
        "quick": not of_record,
        "kind": "run of record: only this benchmark ran on the machine (its own shard servers, moto and client "
        "processes load the 2 cores: see the load averages)",
        "conditions": conditions(work),
        "settings": settings,
        "summary": summary([]),
        "rows": [],
        "tables": tables(runs),
        "runs": runs,
    }
    folder = RESULTS_DIR if of_record else SCRATCH_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cluster.json"
    path.write_text(_one_line_numbers(json.dumps(record, indent=2, ensure_ascii=False)) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each load")
    parser.add_argument("--storage", default="moto", help="storage roots: moto (S3 on loopback), local (a directory)")
    parser.add_argument("--durability", default="wal,delta", help="durability modes (on moto; local: wal)")
    parser.add_argument("--nodes", default="1,2,3", help="cluster sizes, ascending (nodes are added)")
    parser.add_argument("--paths", default="follow,relay", help="client paths: follow (307 once), relay")
    args = parser.parse_args()
    defaults = {"seconds": 5.0, "storage": "moto", "durability": "wal,delta", "nodes": "1,2,3"}
    of_record = all(getattr(args, key) == value for key, value in defaults.items()) and args.paths == "follow,relay"
    storages, durabilities = args.storage.split(","), args.durability.split(",")
    args.nodes = [int(size) for size in args.nodes.split(",")]
    args.paths = args.paths.split(",")
    settings = {
        "shards": SHARDS,
        "clients": CLIENTS,
        "client_processes": harness.PROCESSES,
        "payload_bytes": len(PAYLOAD),
        "seconds": args.seconds,
        "idle_s": IDLE_S,
        "lease_ttl_s": LEASE_TTL_S,
        "nodes": args.nodes,
        "storage": storages,
        "durability": durabilities,
        "paths": args.paths,
    }
    work = Path(tempfile.mkdtemp(prefix="ds-cluster-"))
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(harness.PROCESSES + 1)
    runs: list[dict[str, Any]] = []
    moto: MotoServer | None = None
    try:
        with context.Pool(harness.PROCESSES, _init_client, (barrier,)) as pool:
            if "moto" in storages:
                moto = MotoServer().start(work)
                moto.create_bucket(BUCKET)
                for durability in durabilities:
                    run_root("moto", durability, work, moto, pool, barrier, args, runs)
            if "local" in storages:
                run_root("local", "wal", work, None, pool, barrier, args, runs)
    except Exception as exc:
        of_record = False  # (what was measured is kept, in scratch/)
        settings["failed"] = f"{type(exc).__name__}: {exc}"[:2000]
        progress(f"failed: {settings['failed']}")
    finally:
        if moto is not None:
            moto.stop()
        shutil.rmtree(work, ignore_errors=True)
    path = write_record(runs, settings, of_record, work)
    for table in tables(runs):
        print("\n" + carried_table(table))
    print(f"\nresults: {path}" + ("" if of_record else " (not a run of record: scratch)"))


if __name__ == "__main__":
    main()
