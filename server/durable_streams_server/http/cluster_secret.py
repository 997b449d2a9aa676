"""The cluster-internal credential: what a cluster's own processes present to each other.

A node creates one random secret per storage root, once (``cluster.secret``), and hands it to
the shard servers it starts through the environment (``CLUSTER_SECRET_ENV``). A request
carrying it in ``CLUSTER_SECRET_HEADER`` comes from the cluster itself: it may use the
internal endpoints (``internal``), and it passes where bearer tokens are configured (the home
shard appends wake events to another shard's stream through the router). Compared in
constant time; never logged, never part of an answer.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

CLUSTER_SECRET_ENV = "DURABLE_STREAMS_CLUSTER_SECRET"
CLUSTER_SECRET_HEADER = "durable-streams-cluster-secret"
_HEADER = CLUSTER_SECRET_HEADER.encode()


def presented(secret: str | None, headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether the request's headers carry ``secret`` (never with no secret configured)."""
    if not secret:
        return False
    values = [value for name, value in headers if name == _HEADER]
    return len(values) == 1 and hmac.compare_digest(values[0], secret.encode())
