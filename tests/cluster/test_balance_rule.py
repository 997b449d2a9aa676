"""The balancing rule (``cluster.node.balance``) on its own: when a node gives a shard up."""

from __future__ import annotations

import pytest

from durable_streams_server.cluster.node.balance import cold_start_wait, should_drain


@pytest.mark.parametrize(
    ("shards", "held_by", "drains"),
    [
        (2, {"n0": 2, "n1": 0}, True),  # above the share of two nodes
        (2, {"n0": 1, "n1": 1}, False),  # balanced
        (2, {"n0": 1, "n1": 0}, False),  # at its share, and the other shard is free for n1 to take
        (6, {"n0": 2, "n1": 2, "n2": 0}, False),  # 4 of 6 held: n2 takes the two free ones
        (5, {"n0": 2, "n1": 2, "n2": 1}, False),  # every node at its floor (1)
        (1, {"n0": 0}, False),
    ],
)
def test_a_node_gives_a_shard_up_only_when_no_free_shard_can_fill_the_gap(
    shards: int, held_by: dict[str, int], drains: bool
) -> None:
    assert should_drain(shards, "n0", held_by) is drains


def test_at_its_share_the_node_holding_the_most_gives_one_up_when_nothing_is_free() -> None:
    """3 shards, 3 nodes: n0 and n1 hold 2 and 1 of them, n2 none; only n0 (the most) drains."""
    held_by = {"n0": 2, "n1": 1, "n2": 0}
    assert should_drain(3, "n0", held_by) is True  # (above its share of 1 anyway)
    held_by = {"n0": 2, "n1": 2, "n2": 0}  # 4 shards over 3 nodes: target 2, floor 1, nothing free
    assert [should_drain(4, node, held_by) for node in ("n0", "n1", "n2")] == [False, True, False]


def test_a_cold_start_waits_one_ttl_for_the_nodes_started_with_it() -> None:
    assert cold_start_wait(anyone_holds=False, mine=0, since_start_s=1.0, ttl_s=5.0) is True
    assert cold_start_wait(anyone_holds=False, mine=0, since_start_s=5.0, ttl_s=5.0) is False
    assert cold_start_wait(anyone_holds=True, mine=0, since_start_s=0.0, ttl_s=5.0) is False  # a failover
