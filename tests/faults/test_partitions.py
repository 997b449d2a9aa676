"""Network partitions of one cluster node, in a private network of namespaces (``netns``).

Three nodes, three shards, moto's S3 server as the store, lease ttl 2 s; each node in its
namespace with two links, one to the storage bridge and one to the front bridge (its peers
and the test's clients). The workload (``workload``) runs through every node before, during
and after the fault; a fault lasts five lease ttls, then it is healed and the checker
(``checker``) reads every stream's history and every read back. Every scenario asserts
0 lost, 0 duplicated, 0 forked reads.

=========================  ==========  ===================================================
scenario                   durability  the fault on node n1 (5 ttls), then healed
=========================  ==========  ===================================================
cut_from_storage           delta       its storage link down: it cannot renew; its shard
                                       servers are killed when their leases' validity
                                       ends, and the other nodes take its shards
cut_from_peers_and_clients delta       its front link down: it renews its leases, so its
                                       shards stay its own, unreachable until healed
cut_from_everything        delta       both links down: its shards move, as above
wal_node_cut_off_front_    wal         both links down: its shards stay its own (their
storage                                acknowledged records are in its WAL) until it is
                                       back, answering 503 meanwhile; nothing is lost
wal_node_cut_off_storage   wal         its storage link down, its clients still there: it
                                       acknowledges from its WAL until its leases' validity
                                       ends; then as above
=========================  ==========  ===================================================
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from netns import Link, Network
from scenario import FaultCluster, assert_clean, run_scenario

pytestmark = pytest.mark.slow

VICTIM = 1


def _partition(network: Network, *links: Link) -> tuple[Callable[[], None], Callable[[], None]]:
    return (lambda: network.cut(VICTIM, *links)), (lambda: network.heal(VICTIM, *links))


def test_cut_from_storage(network: Network, netns_cluster: Callable[[str], FaultCluster]) -> None:
    cluster = netns_cluster("delta")
    held = cluster.nodes[VICTIM].shards_held()
    row = run_scenario("cut_from_storage", cluster, *_partition(network, "storage"))
    assert_clean(row)
    assert held, "the node cut off held no shard"


def test_cut_from_peers_and_clients(network: Network, netns_cluster: Callable[[str], FaultCluster]) -> None:
    cluster = netns_cluster("delta")
    row = run_scenario("cut_from_peers_and_clients", cluster, *_partition(network, "front"))
    assert_clean(row)
    assert row.moves == (), row.moves  # it renewed its leases all along: nothing moves


def test_cut_from_everything(network: Network, netns_cluster: Callable[[str], FaultCluster]) -> None:
    cluster = netns_cluster("delta")
    row = run_scenario("cut_from_everything", cluster, *_partition(network, "front", "storage"))
    assert_clean(row)


@pytest.mark.parametrize("links", [("front", "storage"), ("storage",)], ids=["from_everything", "from_storage"])
def test_a_wal_node_cut_off_keeps_its_shards(
    network: Network, netns_cluster: Callable[[str], FaultCluster], links: tuple[Link, ...]
) -> None:
    cluster = netns_cluster("wal")
    victim, other = cluster.nodes[VICTIM], cluster.nodes[0]
    held = victim.shards_held()
    cut, heal = _partition(network, *links)
    seen: list[object] = []

    def heal_after_looking() -> None:
        view = other.describe()
        seen.extend(view["shards"][shard] for shard in held)  # type: ignore[index]
        heal()

    row = run_scenario(f"wal_node_cut_off_{'_'.join(links)}", cluster, cut, heal_after_looking)
    assert_clean(row)
    assert all(shard["state"] == "unavailable" and shard["holder"] == "n1" for shard in seen), seen  # type: ignore[index]
    assert victim.shards_held() == held
