"""The shard moves a scenario caused, read from the nodes' own logs.

A node logs ``shard acquired`` (with ``from=<holder>`` when it took another node's expired
lease, ``from=None`` for a free one, its own id when it took back a lease it lost because its
renewals did not reach the store in time), ``shard lost`` when it loses one, and ``shard
draining`` when it gives a shard up. In these scenarios every shard is held when the fault
begins, so a free lease is one a drain released.
A fault of one node (the *victim*) may move that node's shards to the others (a take-over:
``from=<victim>``) and, once it is back, some back to it (a drain, then the victim acquires the
free lease). Any other acquisition of a free lease, by a healthy node, is a shard moved between
healthy nodes: what the balance rule must never do (``cluster/node/balance.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from cluster_support import Node

_ACQUIRED = re.compile(r'msg="shard acquired" shard=(\d+) from=(\S+)')
_DRAINING = re.compile(r'msg="shard draining" shard=(\d+)')
_LOST = re.compile(r'msg="shard lost" shard=(\d+)')
_FAILED_START = re.compile(r'msg="shard server failed to start[^"]*" shard=(\d+) code=(\S+)')


@dataclass(frozen=True)
class Moves:
    described: tuple[str, ...]
    """Each move, in each node's order: ``n0 took shard 1 from n1``, ``n0 drained shard 0``,
    ``n1 acquired free shard 0``, ``n0 lost shard 1``, ``n0 took shard 1 back`` (a lease of its own
    that expired: not a move); and each failed start of a shard's server (``n0 failed to start
    shard 0 (exit -9)``), which a release follows after ``workers.START_ATTEMPTS``."""
    between_healthy: int
    """Free leases acquired by a node other than the victim."""


def log_sizes(nodes: list[Node]) -> list[int]:
    """Where each node's log ends now: the moves after it are the scenario's."""
    return [_size(node.process.log_path) for node in nodes]


def moves_since(nodes: list[Node], sizes: list[int], victim: str) -> Moves:
    described: list[str] = []
    between_healthy = 0
    for node, size in zip(nodes, sizes, strict=True):
        with open(node.process.log_path, "rb") as log:
            log.seek(size)
            text = log.read().decode(errors="replace")
        for line in text.splitlines():
            if found := _ACQUIRED.search(line):
                shard, holder = found.groups()
                if holder == node.node_id:
                    described.append(f"{node.node_id} took shard {shard} back")
                elif holder != "None":
                    described.append(f"{node.node_id} took shard {shard} from {holder}")
                else:
                    described.append(f"{node.node_id} acquired free shard {shard}")
                    between_healthy += node.node_id != victim
            elif found := _LOST.search(line):
                described.append(f"{node.node_id} lost shard {found.group(1)}")
            elif found := _DRAINING.search(line):
                described.append(f"{node.node_id} drained shard {found.group(1)}")
            elif found := _FAILED_START.search(line):  # (not a move: it says why one may follow)
                described.append(f"{node.node_id} failed to start shard {found.group(1)} (exit {found.group(2)})")
    return Moves(tuple(described), between_healthy)


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0
