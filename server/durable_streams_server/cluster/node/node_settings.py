"""What a cluster node's supervisor runs with (``supervisor.Supervisor``): its identity, where it is
reached, the storage root, the durability of its shard servers and the lease ttl its tick follows."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from ...storage.durability import Durability


@dataclass(frozen=True)
class NodeSettings:
    node_id: str
    advertise_url: str
    storage_uri: str
    durability: Durability
    lease_ttl_s: float = 5.0
    adopt_wal: bool = False
    incarnation: str = field(default_factory=lambda: secrets.token_hex(8))
    """This node process's random id, written in its node object (``membership``)."""

    @property
    def tick_s(self) -> float:
        return self.lease_ttl_s / 5
