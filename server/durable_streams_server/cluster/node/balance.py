"""How many shards a node holds, and when it gives one up: the balancing rule, without I/O.

Shards move only when membership changes. With ``live`` nodes, each should hold
``target = ceil(shards / live)`` shards (``leases.target_count``):

* a node **below** its target takes free shards (no lease, a released one, or one whose
  holder's lease expired: ``leases.may_take``);
* a node **above** it gives one up (a drain: ``supervisor``);
* a node **at** it gives one up only when a live node holds less than the floor share
  (``shards // live``), *no shard is free* for that node to take, and it is the node that
  holds the most (ties: the greatest id), so one node gives up one shard at a time. A shard
  that no live node holds (released a moment ago, or its holder dead) is free: the node below
  its share takes it, and a drain then would only swap shards between healthy nodes;
* **a cold start** (no shard held by anyone: a new cluster, or one whose every node stopped
  cleanly) takes nothing during a node's first lease ttl, so that nodes started together see
  each other's heartbeats first and each takes its share, where the first one would otherwise
  take every shard and drain most of them again (Kafka's group coordinator waits the same way
  before its first assignment: ``group.initial.rebalance.delay.ms``).

Counts come from each node's last view of the leases, which can be a tick old; every rule
above errs towards *not* moving a shard when a view is incomplete.
"""

from __future__ import annotations

from collections.abc import Mapping

from .leases import target_count


def should_drain(shards: int, node_id: str, held_by: Mapping[str, int]) -> bool:
    """Whether ``node_id`` gives a shard up, given how many shards each live node holds
    (``held_by``: every live node, this one included)."""
    mine = held_by[node_id]
    target = target_count(shards, len(held_by))
    if mine > target:
        return True
    if mine == 0 or mine < target:
        return False
    if min(held_by.values()) >= shards // len(held_by):
        return False
    if sum(held_by.values()) < shards:
        return False  # a shard is free: the node below its share takes that one
    return max(held_by.items(), key=lambda item: (item[1], item[0]))[0] == node_id


def cold_start_wait(anyone_holds: bool, mine: int, since_start_s: float, ttl_s: float) -> bool:
    """Whether a node waits before taking its first shard (module docstring: a cold start)."""
    return not anyone_holds and mine == 0 and since_start_s < ttl_s
