"""A shard server's place in its cluster, and the guard every request passes first there.

A shard server (``--cluster-shard k/N``) serves only its own shard's paths
(``cluster.paths``): a request for another shard's path (a client that kept a shard
server's URL after a move) is sent back to the node's router with a 307, before anything is
read or stored. A request carrying the cluster's credential (``credential``) on one of the
cluster's internal routes passes without a token; on every other route the credential opens
nothing. ``ShardGuard`` is both checks: the app's ``http.ports.Admission``, plugged in by the
server's assembly (``shard.serving``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from starlette.types import Scope

from ...config import ServerConfig, parse_shard
from ...http.routes import match_route, route_path
from ...protocol.errors import Moved
from ..paths import shard_of_path
from .credential import presented

INTERNAL_ROUTES = frozenset({"internal", "cluster"})
"""The cluster's own routes, where its credential stands in for a token (each checks it itself:
``credential.require``); on every other route the credential opens nothing."""


def redirect(location: str) -> Moved:
    """A 307 to ``location`` in the protocol's JSON error shape (the method and body are kept)."""
    return Moved(f"this stream is served at {location}", headers={"Location": location})


@dataclass(frozen=True)
class ShardGuard:
    """A shard server's check that a request is its shard's."""

    shard: int
    shards: int
    router_url: str
    secret: str | None = field(default=None, repr=False)  # (never in a repr or a log)
    """The cluster-internal credential (``credential``), if the node handed one over."""
    fork_max_bytes: int = 256 * 1024 * 1024
    """The most a fork of another shard's stream copies (``fork_copies``)."""

    @classmethod
    def parse(cls, spec: str, router_url: str, secret: str | None = None) -> ShardGuard:
        """From ``--cluster-shard k/N``; ``ValueError`` if malformed."""
        shard, shards = parse_shard(spec)
        return cls(shard, shards, router_url.rstrip("/"), secret)

    def refusal(self, scope: Scope) -> Moved | None:
        path = route_path(scope)
        found = shard_of_path(path, self.shards)
        if found is None or found == self.shard:
            return None
        raw: bytes = scope.get("raw_path") or path.encode()
        query: bytes = scope.get("query_string", b"")
        location = self.router_url + raw.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
        return redirect(location)

    def internal(self, scope: Scope) -> bool:
        """Whether the request carries the cluster's credential on one of its internal routes."""
        if not presented(self.secret, scope["headers"]):
            return False
        found = match_route(route_path(scope))
        return found is not None and found[0] in INTERNAL_ROUTES


def shard_guard(config: ServerConfig) -> ShardGuard | None:
    """The guard of a shard server run with ``config``; ``None``: no cluster's shard server."""
    if config.cluster_shard is None or config.cluster_router is None:
        return None
    guard = ShardGuard.parse(config.cluster_shard, config.cluster_router, config.cluster_secret)
    return dataclasses.replace(guard, fork_max_bytes=config.cross_shard_fork_max_bytes)
