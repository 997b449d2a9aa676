"""Which shard a request path belongs to, and the guard of a cluster's shard server.

A stream's **shard key** is the first segment of its path on the base surface
(``/v1/stream/<key>/...``) or its bucket on the bucketed surface (``/<bucket>/...``), so a
bucket's listing, and forks and subscriptions among streams of one key, stay within one
shard. Probes, signed file URLs, the consumers' listing and the status page have no key: the
server they reach answers them.

A shard server (``--cluster-shard k/N``) serves only its own shard's paths: a request for
another shard's path (a client that kept a shard server's URL after a move) is sent back
to the node's router with a 307, before anything is read or stored.

The cluster-internal routes (``/v1/cluster/fork-links/<source path>``: a fork's shard
asking a source's shard for an export, or removing its link: ``fork_copies``) belong to
the shard of the stream path they name, so the router and the guard send them where that
stream lives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.types import Scope

from ..protocol.errors import Moved
from ..protocol.ids import BASE_SURFACE_PREFIX
from ..protocol.shard_keys import shard_of_key
from .routes import match_route, route_path


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
    """The cluster-internal credential (``cluster_secret``), if the node handed one over."""
    fork_max_bytes: int = 256 * 1024 * 1024
    """The most a fork of another shard's stream copies (``fork_copies``)."""

    @classmethod
    def parse(cls, spec: str, router_url: str, secret: str | None = None) -> ShardGuard:
        """From ``--cluster-shard k/N``; ``ValueError`` if malformed."""
        shard_text, _, count_text = spec.partition("/")
        shard, shards = int(shard_text), int(count_text)
        if not 0 <= shard < shards:
            raise ValueError(f"shard {shard} is outside 0..{shards - 1}")
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
