"""The cluster-internal credential: what a cluster's own processes present to each other.

A node creates one random secret per storage root, once (``cluster.node.secret``), and hands it to
the shard servers it starts with their settings (``cluster.node.workers``); a shard server started
by hand reads it from ``settings.CLUSTER_SECRET_ENV``. A request
carrying it in ``CLUSTER_SECRET_HEADER`` comes from the cluster itself: it may use the
internal routes (``internal``, ``fork_exports``), and only those: on the public surface it
stands in for no token (``guard.ShardGuard.internal``), so whoever learns it can reach the
cluster's internal endpoints, never write or delete a stream through the protocol. Compared in
constant time; never logged, never part of an answer.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from ...protocol.errors import Forbidden, NotFound

CLUSTER_SECRET_HEADER = "durable-streams-cluster-secret"
_HEADER = CLUSTER_SECRET_HEADER.encode()


def presenting(secret: str | None) -> str:
    """The secret a request of the cluster carries: the first of ``secret``'s lines."""
    return (secret or "").split("\n", 1)[0]


def presented(secret: str | None, headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether the request's headers carry one of ``secret``'s lines (never with no secret
    configured). Every line is accepted, so a secret is rotated with no request refused: add
    the new one second on every node, then first, then drop the old one (``cluster.node.secret``)."""
    if not secret:
        return False
    values = [value for name, value in headers if name == _HEADER]
    if len(values) != 1:
        return False
    matches = [hmac.compare_digest(values[0], line.encode()) for line in secret.split("\n") if line]
    return any(matches)


def require(secret: str | None, path: str, headers: Sequence[tuple[bytes, bytes]]) -> None:
    """The gate of every internal route: 404 on a server with no secret (no cluster shard
    server: the route does not exist there), 403 for a request that does not carry it."""
    if not secret:
        raise NotFound(f"no resource {path!r}", code="NOT_FOUND")
    if not presented(secret, headers):
        raise Forbidden("the cluster's internal routes need the cluster-internal credential")
