"""Shards move only when membership changes: nodes that start together take their shares
without one of them grabbing every shard and draining it again, and healthy nodes that hold
their share never give a shard to one another.

Moves are counted from the nodes' own logs (``shard acquired``, ``shard draining``), which
every acquisition and every drain writes, so no move can slip between two samples. How long
balancing took is printed (a measurement, not a bound: ``bench/`` keeps timings)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cluster_support import Node, serving, start_node
from servers import ServerProcess, wait_for

pytestmark = pytest.mark.slow

TTL_S = 5.0
"""The default lease ttl: nodes launched within one ttl of each other take their shares without a drain."""


def _count(nodes: list[Node], message: str) -> int:
    return sum(node.process.log_path.read_text().count(f'msg="{message}"') for node in nodes)


def _balanced(nodes: list[Node], shards: int) -> Callable[[], bool]:
    steady = serving(nodes, shards)
    return lambda: steady() and all(len(node.shards_held()) == shards // len(nodes) for node in nodes)


def test_nodes_started_together_take_their_shares_without_a_drain(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "6", "--lease-ttl-s", str(TTL_S)]

    def launch(index: int) -> Node:  # (launched 1.5 s apart, as an orchestrator starting three machines)
        time.sleep(1.5 * index)  # (the launches are staggered: time is the scenario)
        return start_node(server_factory, storage, f"n{index}", tmp_path)

    with ThreadPoolExecutor(3) as pool:
        nodes = list(pool.map(launch, range(3)))
    listening = time.monotonic()
    wait_for(_balanced(nodes, 6), timeout_s=120, message=lambda: str([node.describe() for node in nodes]))
    print(f"three nodes started together: balanced {time.monotonic() - listening:.1f} s after the last listened")
    time.sleep(3 * TTL_S)  # (and it stays so)
    assert _balanced(nodes, 6)()
    assert _count(nodes, "shard draining") == 0, "a node took more than its share and gave shards up again"
    assert _count(nodes, "shard acquired") == 6
