"""Which shard a request path belongs to: the one rule a node's router and its shard servers share.

A stream's **shard key** is the first segment of its path on the base surface
(``/v1/stream/<key>/...``) or its bucket on the bucketed surface (``/<bucket>/...``), so a
bucket's listing, and forks and subscriptions among streams of one key, stay within one
shard. Probes, signed file URLs, the consumers' listing and the status page have no key: the
server they reach answers them.

The cluster-internal routes (``/v1/cluster/fork-links/<source path>``: a fork's shard
asking a source's shard for an export, or removing its link: ``shard.fork_copies``) belong
to the shard of the stream path they name, so the router and the guard send them where that
stream lives.

A key maps to a shard by BLAKE2b, not Python's ``hash`` (salted per process): every node and
every shard server must map a key to the same shard.
"""

from __future__ import annotations

import hashlib

from ..http.routes import match_route
from ..protocol.ids import BASE_SURFACE_PREFIX


def shard_of_key(key: str, shards: int) -> int:
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def shard_key(path: str) -> str | None:
    """The shard key of a request path (module docstring), or ``None`` for a path that is no
    stream's."""
    found = match_route(path)
    if found is None:
        return None
    route, params = found
    if route in ("healthz", "readyz", "metrics", "files", "consumers", "ui", "status", "internal"):
        return None
    if route == "cluster":
        return shard_key("/" + params["path"])
    if route == "base" or (route == "control" and "bucket_id" not in params):
        rest = path.lstrip("/")[len(BASE_SURFACE_PREFIX) :]
        return "v1/" + rest.split("/", 1)[0]
    return "b/" + params["bucket_id"]


def shard_of_path(path: str, shards: int) -> int | None:
    """The shard serving ``path`` in a cluster of ``shards``, or ``None`` (``shard_key``)."""
    key = shard_key(path)
    return None if key is None else shard_of_key(key, shards)
