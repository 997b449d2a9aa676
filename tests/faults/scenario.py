"""A fault scenario from start to row: the cluster under the workload, the fault, the heal,
the time until every shard is served again, the checker (``checker.check``).

``run_scenario`` runs the workload (``workload.Workload``) until every producer has had
appends acknowledged, for ``before_s`` more, injects the fault, keeps the workload going for
``hold_s`` (longer than a lease ttl), heals, times how long until every node sees every shard
served by exactly one holder, each node holding its share ("seconds until every shard is
served again": a shard moved back to the healed node counts), waits until every
producer has appends acknowledged again (every stream writable), stops the workload and
checks. The row is written to ``tests/faults/results/<scenario>.json`` only when the
environment variable ``FAULT_RESULTS`` is set (a normal run writes nothing into the tree).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import requests
from checker import Row, check
from cluster_support import JSON, Node, name_in_shard, send
from moves import log_sizes, moves_since
from servers import wait_for
from workload import Workload

RESULTS = Path(__file__).resolve().parent / "results"
LEASE_TTL_S = 2.0
NODE_OPTIONS = ["--lease-ttl-s", str(LEASE_TTL_S), "--long-poll-timeout-ms", "1500", "--sse-reconnect-ms", "3000"]
"""Every node's options besides its storage (shard servers get them too)."""


@dataclass
class FaultCluster:
    nodes: list[Node]
    shards: int
    durability: str

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def views(self) -> list[object]:
        found: list[object] = []
        for node in self.nodes:
            try:
                found.append(requests.get(f"{node.url}/v1/cluster", timeout=2).json())
            except (requests.RequestException, ValueError) as exc:
                found.append(f"{node.node_id}: {type(exc).__name__}")
        return found

    def served(self) -> bool:
        """Every node answers, and sees every shard served, each held by exactly one node, and
        every node holds its share: no move back to a node that was away is still to come (a
        shard moving is unavailable, so the time to serve again includes that move)."""
        held: list[int] = []
        for view in self.views():
            if not isinstance(view, dict) or any(shard["state"] != "serving" for shard in view["shards"]):
                return False
            if len(view["held"]) < self.shards // len(self.nodes):
                return False
            held += view["held"]
        return sorted(held) == list(range(self.shards))


def run_scenario(
    scenario: str,
    cluster: FaultCluster,
    inject: Callable[[], None],
    heal: Callable[[], None],
    *,
    hold_s: float = 5 * LEASE_TTL_S,
    before_s: float = 2.0,
    victim: int = 1,
) -> Row:
    """The scenario's row (module docstring)."""
    prefix = f"{scenario}-{uuid.uuid4().hex[:6]}"
    streams = [name_in_shard(shard, cluster.shards, prefix) for shard in range(cluster.shards)]
    for stream in streams:
        answer = send("PUT", f"{cluster.urls[0]}/v1/stream/{stream}", headers=JSON)
        assert answer.status_code == 201, answer.text
    workload = Workload(cluster.urls, streams)
    began = time.monotonic()
    workload.start()
    try:
        _progress(workload, cluster, 5)
        time.sleep(before_s)  # (the workload runs a while before the fault: time is the scenario)
        acknowledged_before = workload.acknowledged()
        logs = log_sizes(cluster.nodes)
        moving = cluster.nodes[victim].shards_held()
        injected = time.monotonic()
        inject()
        failed_over = _failed_over(cluster, victim, moving, injected + hold_s)
        acknowledged_in_fault = workload.acknowledged() - acknowledged_before
        heal()
        healed = time.monotonic()
        wait_for(cluster.served, timeout_s=120, message=lambda: str(cluster.views()))
        served = time.monotonic()
        _progress(workload, cluster, 5)
    finally:
        workload.stop_writers()
        workload.stop_readers()
    stopped = time.monotonic()
    row = check(scenario, workload, cluster.urls[0], fault=(injected, served), seconds_to_serve_again=served - healed)
    row.counts["acknowledged_in_fault"] = acknowledged_in_fault
    row.seconds_to_fail_over = None if failed_over is None else round(failed_over - injected, 2)
    moves = moves_since(cluster.nodes, logs, cluster.nodes[victim].node_id)
    row.moves, row.moves_between_healthy = moves.described, moves.between_healthy
    phases = {"before": injected - began, "fault": healed - injected, "to serve": served - healed}
    phases |= {"after": stopped - served, "check": time.monotonic() - stopped}
    print(f"{scenario}: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items()))
    if os.environ.get("FAULT_RESULTS"):
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{scenario}.json").write_text(json.dumps(row.as_json(), indent=2) + "\n")
    print(json.dumps(row.as_json()))
    return row


def _failed_over(cluster: FaultCluster, victim: int, moving: list[int], until_s: float) -> float | None:
    """Until ``until_s`` (the fault's end): when the shards ``moving`` (the victim's) were all
    served by another node, as a healthy node saw it; ``None`` if they never were (a node cut
    from its peers keeps its leases; a WAL node's shards wait for it)."""
    watcher = cluster.nodes[0 if victim else 1]
    found: float | None = None
    while time.monotonic() < until_s:
        if found is None:
            try:
                shards = requests.get(f"{watcher.url}/v1/cluster", timeout=1).json()["shards"]
            except (requests.RequestException, ValueError, KeyError):
                shards = None
            if (
                shards is not None
                and moving
                and all(
                    shards[shard]["state"] == "serving" and shards[shard]["holder"] != cluster.nodes[victim].node_id
                    for shard in moving
                )
            ):
                found = time.monotonic()
        time.sleep(0.1)  # (watched until the fault's end: time bounds the loop, not a condition)
    return found


def _progress(workload: Workload, cluster: FaultCluster, count: int) -> None:
    """Every producer has ``count`` more appends acknowledged than now."""
    start = [len(producer.acknowledged) for producer in workload.producers]
    wait_for(
        lambda: all(len(p.acknowledged) >= n + count for p, n in zip(workload.producers, start, strict=True)),
        timeout_s=90,
        message=lambda: f"{[len(p.acknowledged) for p in workload.producers]} {workload.failures()} {cluster.views()}",
    )


def assert_clean(row: Row) -> None:
    """0 lost, 0 duplicated, 0 forked (and nothing reordered or never sent), no shard moved between
    healthy nodes, and reads were made."""
    assert (row.lost, row.duplicated, row.forked_reads, row.reordered, row.phantom) == (0, 0, 0, 0, 0), row.problems
    assert row.moves_between_healthy == 0, row.moves  # (shards move only when membership changes)
    assert row.counts["reads"] > 0 and row.acknowledged > 0, row
