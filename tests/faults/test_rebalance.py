"""The moves that follow a heal: a node back (or new) costs one move per shard it gets.

After every fault scenario the node that was cut off or stopped comes back with no shard,
and the others give it its share. A node at its share used to drain one more shard whenever
another held less than the floor share, even while a shard was free for that node to take
(one released a moment ago): one return cost three or four drains instead of one, each
making a shard unavailable for seconds (``cluster.node.balance`` now counts free shards). The
smallest deterministic case is a node joining a node that holds both shards of two: checked
here on a local storage root."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cluster_support import serving, start_node
from servers import ServerProcess, wait_for

pytestmark = pytest.mark.slow


def drains(process: ServerProcess) -> list[str]:
    return [line for line in process.log_text().splitlines() if 'msg="shard draining"' in line]


def test_a_joining_node_costs_one_move(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> None:
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "2", "--lease-ttl-s", "2"]
    holder = start_node(server_factory, storage, "n1", tmp_path)
    wait_for(serving([holder], 2), timeout_s=60)
    assert holder.shards_held() == [0, 1]
    joining = start_node(server_factory, storage, "n0", tmp_path)
    wait_for(lambda: serving([holder, joining], 2)() and len(joining.shards_held()) == 1, timeout_s=60)
    time.sleep(3 * 2)  # (three lease ttls: any further move would have started)
    assert serving([holder, joining], 2)()
    moves = drains(holder.process) + drains(joining.process)
    assert len(moves) == 1, moves
