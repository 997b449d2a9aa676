"""The cluster's rules on their own: when a node gives a shard up (``cluster.node.balance``), and how it
takes one (``workers.TakeOverPlan``)."""

from __future__ import annotations

import pytest

from durable_streams_server.cluster.node.balance import cold_start_wait, should_drain
from durable_streams_server.cluster.node.leases import LeaseRecord
from durable_streams_server.cluster.node.workers import TAKE_OVER_TIMEOUT_S, TakeOverPlan
from durable_streams_server.storage.durability import Durability


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


WAIT_S = TAKE_OVER_TIMEOUT_S


@pytest.mark.parametrize(
    ("previous", "plan"),
    [
        (None, ("ask", WAIT_S, None)),
        (LeaseRecord(shard=0, holder=None, state="released"), ("ask", WAIT_S, None)),
        (LeaseRecord(shard=0, holder="n1", state="serving", durability=Durability.DELTA), ("ask", 0.0, "n1")),
        (LeaseRecord(shard=0, holder="n1", state="serving", durability=Durability.WAL), ("force", 0.0, "n1")),
        (LeaseRecord(shard=0, holder="n0", state="serving", durability=Durability.WAL), ("ask", WAIT_S, "n0")),
    ],
    ids=["never-held", "released", "expired-delta", "expired-wal", "its-own-expired"],
)
def test_a_take_over_plan_names_whose_lease_was_taken_and_never_forces_its_own(
    previous: LeaseRecord | None, plan: tuple[str, float, str | None]
) -> None:
    """A node taking back its own expired lease logs ``from=<itself>`` (the fault suite counts it
    as no move) and asks its location's owner as for a free one: its servers were killed when the
    validity ended, and a WAL location of its own is never forced."""
    taken = TakeOverPlan.of(previous, "n0")
    assert (taken.mode, taken.owner_wait_s, taken.taken_from) == plan
