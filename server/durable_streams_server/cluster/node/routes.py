"""A node's routing table: where each shard is served now, as its router answers from it.

The supervisor (``supervisor``) computes it once a tick from the leases it holds and the versions it
last read of the others' (``routing_table``), and publishes it whole (one attribute, replaced),
so the router reads it without locks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from .leases import Held, Observed

RouteState = Literal["serving", "unavailable"]


@dataclass(frozen=True)
class Route:
    """Where a shard is served now (``url``), or that it is not (moving, starting, no owner)."""

    state: RouteState
    url: str | None = None
    holder: str | None = None


def routing_table(shards: int, held: Mapping[int, Held], seen: Mapping[int, Observed], now: float) -> tuple[Route, ...]:
    """A shard is served where its lease says ``serving`` (a held lease, or another node's that
    has not expired); else it is unavailable (naming its holder, if any)."""
    routes = []
    for shard in range(shards):
        mine, theirs = held.get(shard), seen.get(shard)
        record = mine.record if mine is not None else (theirs.record if theirs is not None else None)
        live = mine is not None or (theirs is not None and not theirs.expired(now))
        if record is not None and live and record.state == "serving" and record.url:
            routes.append(Route("serving", record.url, record.holder))
        else:
            routes.append(Route("unavailable", None, record.holder if record else None))
    return tuple(routes)
