"""The permission policy: what a request needs, and whether a token's grant has it.

A request is looked up in the route table (``routes.match_route``), so it is judged as the
router will serve it. Streams are identified by their key: ``v1/stream/<path>`` on the base
surface (a sub-resource such as ``.../x/snapshot/5`` belongs to stream ``.../x``, see
``base_target``), ``<bucket_id>/<stream_id>`` on the bucketed one.

- GET/HEAD read; PUT/POST/DELETE on streams and snapshots write; creating a fork also
  reads its source.
- Bucket metadata and listings read the bucket; changing a bucket is admin on it;
  writing the listing (which answers 405) is write on the bucket.
- ``/healthz`` and ``/readyz`` need nothing to read; ``/metrics`` needs an unlimited admin
  grant; other methods there are treated as changes of a bucket of that name.
- The reserved ``__ds`` namespace of a root (subscriptions, ``control``): see
  ``_control_needs``.
- ``/v1/files/...`` (a read plan's signed file URLs) needs no token: the signature is the grant.
- ``/v1/cluster/fork-links/...`` (cluster-internal, ``cluster.shard.fork_exports``) needs no token: only the
  cluster's own credential opens it, whatever token a request carries.
- ``/v1/consumers`` needs a valid token; its answer is cut to the streams the token may read.
- ``/ui`` (the status page's static files) needs none; ``/v1/status/...`` needs a valid token, and
  each answer there is cut to what that token may read (``ui.status``).
- Paths no route serves need just a valid token, and get their 404 from the router.

A grant covers a stream if the key starts with one of its ``prefixes`` or lies in one of
its ``buckets``; a bucket if it is one of its ``buckets``; with neither it covers all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..engine.buckets import bucket_of
from ..protocol.ids import BASE_SURFACE_PREFIX
from ..protocol.tokens import AccessScope, TokenGrant
from .routes import PROBES, match_route
from .targets import base_target, stream_name_from_reference

WAKE_TOKEN_ACTIONS = ("callback", "ack", "release")


@dataclass(frozen=True)
class Need:
    """One permission a request needs: a scope on a stream, a bucket, or the whole server.

    ``kind="any"`` (paths no route serves) is met by every valid token, so those still
    need one but get their 404 from the router.
    """

    scope: AccessScope
    kind: Literal["stream", "bucket", "server", "any"]
    target: str = ""

    def covered_by(self, grant: TokenGrant) -> bool:
        if grant.unlimited or self.kind == "any":
            return True
        if self.kind == "stream":
            located = bucket_of(self.target)
            return self.target.startswith(grant.prefixes) or (located is not None and located[0] in grant.buckets)
        return self.kind == "bucket" and self.target in grant.buckets

    def describe(self) -> str:
        """Names what a grant lacks ("any" never needs naming: every grant covers it)."""
        return f"{self.kind} {self.target!r}" if self.kind in ("stream", "bucket") else "the whole server"


def request_needs(method: str, path: str, fork_from: str | None) -> tuple[Need, ...]:
    """What a request to ``path`` (as the router sees it) needs; nothing for the health probes."""
    matched = match_route(path)
    if matched is None:
        return (Need("read", "any"),)
    route, params = matched
    reading = method in ("GET", "HEAD")
    if route in PROBES:
        if not reading:
            return (Need("admin", "bucket", route),)
        return (Need("admin", "server"),) if route == "metrics" else ()
    if route == "files":
        return ()  # the URL's signature is the grant (``read_plans``)
    if route == "cluster":
        return ()  # the cluster's internal credential is the grant (``cluster.shard``), never a client token
    if route == "consumers":
        return (Need("read", "any"),)  # any valid token; the answer holds only what it may read
    if route == "ui":
        return ()  # the page's own files hold no data; the page asks for a token itself
    if route == "internal":
        return ()  # the cluster-internal credential is the grant (``cluster.shard.internal``)
    if route == "status":
        return (Need("read", "any"),)  # any valid token; its answers hold only what the token may read
    if route == "control":
        bucket_id = params.get("bucket_id")
        root = (
            Need("read", "bucket", bucket_id) if bucket_id is not None else Need("read", "stream", BASE_SURFACE_PREFIX)
        )
        return _control_needs(method, params.get("rest", "").split("/"), root)
    if route == "base":
        stream, _, _ = base_target(BASE_SURFACE_PREFIX + params["path"])
        return _stream_needs(method, stream, fork_from)
    if route == "bucket":
        return (Need("read" if reading else "admin", "bucket", params["bucket_id"]),)
    if route == "listing":
        return (Need("read" if reading else "write", "bucket", params["bucket_id"]),)
    return _stream_needs(method, f"{params['bucket_id']}/{params['stream_id']}", fork_from)


def _control_needs(method: str, rest: list[str], root: Need) -> tuple[Need, ...]:
    """The ``__ds`` namespace. A subscription can cover any stream of its root (a pattern is
    only known from the body), so managing or claiming one needs write on the whole root
    (the base surface, or the bucket); reading one needs read on it. The JWKS is public,
    and callback/ack/release carry their own wake token instead of a service token."""
    if rest == ["jwks.json"] or (len(rest) == 3 and rest[0] == "subscriptions" and rest[2] in WAKE_TOKEN_ACTIONS):
        return ()
    if rest[0] == "consumers":
        return (root,)  # recording one's own read progress is part of reading (``consumers``)
    if method in ("GET", "HEAD"):
        return (root,)
    return (Need("write", root.kind, root.target),)


def _stream_needs(method: str, key: str, fork_from: str | None) -> tuple[Need, ...]:
    need = Need("read" if method in ("GET", "HEAD") else "write", "stream", key)
    if method == "PUT" and fork_from is not None:
        return need, Need("read", "stream", stream_name_from_reference(fork_from))
    return (need,)


def unmet(grant: TokenGrant, method: str, needs: Sequence[Need]) -> tuple[Need, str] | None:
    """The first need ``grant`` does not meet, and what the grant lacks for it; ``None``: allowed."""
    for need in needs:
        if not grant.includes(need.scope):
            return need, f"has scope {grant.scope!r}; {method} on {need.describe()} needs {need.scope!r}"
        if not need.covered_by(grant):
            return need, f"does not cover {need.describe()}"
    return None
