"""Cluster paths that lost data or availability (issue 41), each on real node processes.

- Two processes with one node id: the second refuses to start, naming the id and the first's URL.
- ``--take-over force`` adopts the WAL leases that were expired when the node started, not
  one that expires later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cluster_support import serving, start_node, until
from servers import ServerProcess

pytestmark = pytest.mark.slow


def test_a_second_process_with_a_live_node_id_refuses_to_start(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """Without the check, the second overwrote the node object and both served, taking each
    other's shards (a lease naming one's own id is taken at once)."""
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "2", "--lease-ttl-s", "2"]
    first = start_node(server_factory, storage, "n0", tmp_path)
    until(serving([first], 2), timeout_s=120)
    with pytest.raises(RuntimeError) as refused:
        start_node(server_factory, storage, "n0", tmp_path / "elsewhere")
    assert "node id 'n0' is in use by a live node at " + first.url in str(refused.value)
    assert first.shards_held() == [0, 1]

    first.process.stop()  # a clean stop marks the id free: the same id starts at once
    again = start_node(server_factory, storage, "n0", tmp_path / "elsewhere")
    until(serving([again], 2), timeout_s=120)


def test_take_over_force_adopts_the_wal_leases_expired_at_the_start_only(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """Without the scoping, the forced node took the second WAL node's shard too once its lease
    expired (n2 held both shards), giving up records the operator never meant to give up."""
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "2", "--lease-ttl-s", "2"]
    storage += ["--durability", "wal", "--flush-interval-ms", "600000"]
    nodes = [start_node(server_factory, storage, f"n{index}", tmp_path) for index in range(2)]
    until(serving(nodes, 2), timeout_s=120)
    dead, other = nodes
    dead.kill()

    forced = start_node(server_factory, storage, "n2", tmp_path, "--take-over", "force")
    until(serving([forced, other], 2), timeout_s=120)  # (n2 adopted n0's shard; the two may swap after)
    (held,) = forced.shards_held()
    (kept,) = other.shards_held()
    other.kill()  # its WAL lease expires now, long after n2 started
    time.sleep(3 * 2)  # three lease ttls
    assert forced.shards_held() == [held]
    view = forced.describe()["shards"][kept]  # type: ignore[index]
    assert (view["state"], view["holder"]) == ("unavailable", "n1")
