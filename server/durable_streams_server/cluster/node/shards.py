"""A cluster's fixed shape: its shard count, and where each shard's storage lives (pure).

Storage decision
----------------
A cluster's storage root holds one record, ``_cluster/cluster.json``, written once with
put-if-absent by the first node to start (``Layout``): the number of shards, fixed for the
root's life, and where the shards' storage locations are. Every shard is a complete
storage location of its own -- its Delta table, its ownership epochs (``storage.ownership``)
-- so shards never contend on one commit log, and a shard is served exactly as a single
server serves its location. ``shard-dirs``: shard ``k`` lives at ``<root>/shard-<kkkk>``.
``root``: one shard, the root itself -- a location written by a single server is adopted
as it is, without moving a byte (its table stays where it was). Cluster objects live under
``_cluster/``: Delta's vacuum leaves paths that start with ``_`` alone.

Which shard a request's stream belongs to is ``cluster.paths.shard_of_path``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

LAYOUT_KEY = "_cluster/cluster.json"
LEASES_PREFIX = "_cluster/leases/"
NODES_PREFIX = "_cluster/nodes/"
TABLES_PREFIX = "_cluster/tables/"
FORMAT = 1
MAX_SHARDS = 4096


class LayoutError(ValueError):
    """The cluster record is unreadable or does not fit this code."""


@dataclass(frozen=True)
class Layout:
    """The cluster's fixed shape: its shard count and where shard storage lives."""

    shards: int
    placement: Literal["shard-dirs", "root"] = "shard-dirs"

    def __post_init__(self) -> None:
        if not 1 <= self.shards <= MAX_SHARDS:
            raise LayoutError(f"shards must be 1 to {MAX_SHARDS}, got {self.shards}")
        if self.placement == "root" and self.shards != 1:
            raise LayoutError("a root placement holds exactly one shard")

    def shard_uri(self, root: str, shard: int) -> str:
        """The storage location (``--storage-uri``) of ``shard`` under ``root``."""
        if not 0 <= shard < self.shards:
            raise LayoutError(f"shard {shard} is outside 0..{self.shards - 1}")
        if self.placement == "root":
            return root
        return f"{root.rstrip('/')}/shard-{shard:04d}"

    def to_bytes(self) -> bytes:
        return json.dumps({"format": FORMAT, "shards": self.shards, "placement": self.placement}).encode()

    @classmethod
    def from_bytes(cls, body: bytes) -> Layout:
        try:
            record = json.loads(body)
            shards, placement, fmt = int(record["shards"]), record["placement"], int(record["format"])
        except (ValueError, KeyError, TypeError) as exc:
            raise LayoutError(f"{LAYOUT_KEY} is not a cluster record: {exc}") from None
        if fmt != FORMAT:
            raise LayoutError(f"{LAYOUT_KEY} has format {fmt}; this server reads format {FORMAT}")
        if placement not in ("shard-dirs", "root"):
            raise LayoutError(f"{LAYOUT_KEY} names an unknown placement {placement!r}")
        return cls(shards, placement)


def lease_key(shard: int) -> str:
    return f"{LEASES_PREFIX}{shard:04d}.json"


def table_key(shard: int) -> str:
    """The record of the table ``shard``'s location holds (``shard_tables``)."""
    return f"{TABLES_PREFIX}{shard:04d}.json"


def node_key(node_id: str) -> str:
    return f"{NODES_PREFIX}{node_id}.json"
