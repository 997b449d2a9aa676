"""The route table: which paths the server answers, and as which kind of resource.

``ROUTES`` is the one place that says so. The app builds its Starlette routes from it, and
the permission policy looks a request up in it with ``match_route`` before the router
runs, so the two agree on what a path is: the route, its parameters, and where the
router's trailing-slash redirect would send a path that no route matches. Routes are
tried in order, the first match wins (as in Starlette's router).

Every route accepts every method (else ``POST /healthz`` would fall through to the bucket
route); the endpoints answer 405 themselves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Literal

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, compile_path
from starlette.types import Scope

from ..protocol.ids import BASE_SURFACE_PREFIX
from ..protocol.subscriptions import RESERVED_SEGMENT

RouteName = Literal[
    "healthz",
    "readyz",
    "metrics",
    "files",
    "consumers",
    "ui",
    "status",
    "cluster",
    "internal",
    "control",
    "base",
    "bucket",
    "listing",
    "bucketed",
]
Endpoint = Callable[[Request], Awaitable[Response]]

METHODS = ("GET", "HEAD", "PUT", "POST", "PATCH", "DELETE", "OPTIONS")
PROBES: frozenset[RouteName] = frozenset({"healthz", "readyz", "metrics"})
"""The server's own top-level paths (``/healthz``, ``/readyz``, ``/metrics``)."""
READY_PID_HEADER = "Durable-Streams-Server-Pid"
"""A ready server's process id, on its ``/readyz`` answer: a cluster node publishes a shard
server only once its own process answers (another process can listen on the port it chose)."""

ROUTES: tuple[tuple[RouteName, str], ...] = (
    ("healthz", "/healthz"),
    ("readyz", "/readyz"),
    ("metrics", "/metrics"),
    # Data files for signed read-plan URLs (``read_plans``); ``v1`` is no bucket id.
    ("files", "/v1/files/{path:path}"),
    # Every named consumer's lag (``consumers``).
    ("consumers", "/v1/consumers"),
    # The reserved ``__ds`` namespace of each surface (subscriptions), before any stream route.
    ("control", f"/{BASE_SURFACE_PREFIX}{RESERVED_SEGMENT}"),
    ("control", f"/{BASE_SURFACE_PREFIX}{RESERVED_SEGMENT}/{{rest:path}}"),
    ("base", f"/{BASE_SURFACE_PREFIX}{{path:path}}"),
    # The status page and its JSON (``ui``): ``ui`` is too short for a bucket id, so neither
    # shadows a bucket, and both lie outside the base surface ``/v1/stream/`` (after its route,
    # so its requests are not tried against them).
    ("ui", "/"),  # (the server's root leads to its status page)
    ("ui", "/ui"),
    ("ui", "/ui/{asset:path}"),
    ("status", "/v1/status/{view:path}"),
    # Cluster-internal, answered by the server's ``ports.InternalRoutes`` (404 on a single server):
    # a fork's shard asks the shard of its source, named by the path (``cluster.shard.fork_copies``).
    ("cluster", "/v1/cluster/fork-links/{path:path}"),
    # A cluster's internal endpoints (``cluster.shard.internal``): ``v1`` is no bucket id either.
    ("internal", "/v1/internal/{rest:path}"),
    ("bucket", "/{bucket_id}"),
    ("control", f"/{{bucket_id}}/{RESERVED_SEGMENT}"),
    ("control", f"/{{bucket_id}}/{RESERVED_SEGMENT}/{{rest:path}}"),
    ("listing", "/{bucket_id}/streams"),
    ("bucketed", "/{bucket_id}/{stream_id}"),
    ("bucketed", "/{bucket_id}/{stream_id}/{resource}"),
    ("bucketed", "/{bucket_id}/{stream_id}/{resource}/{token}"),
)

_COMPILED = [(name, *compile_path(path)) for name, path in ROUTES]


def starlette_routes(endpoints: Mapping[RouteName, Endpoint]) -> list[Route]:
    return [Route(path, endpoints[name], methods=METHODS) for name, path in ROUTES]


def route_path(scope: Scope) -> str:
    """The path the router matches: ``scope["path"]`` without the ``root_path`` of a mount."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and (path == root or path[len(root)] == "/"):
        return path[len(root) :]
    return path


def match_route(path: str) -> tuple[RouteName, dict[str, str]] | None:
    """The route serving ``path`` (as ``route_path`` gives it) and its parameters.

    A path no route matches is tried as the router's redirect target (trailing '/'
    removed, or added), since that is where its answer sends the client; ``None`` if
    neither matches (the router answers 404).
    """
    found = _match(path)
    if found is None and path != "/":
        found = _match(path.rstrip("/") if path.endswith("/") else path + "/")
    return found


def _match(path: str) -> tuple[RouteName, dict[str, str]] | None:
    for name, regex, _, convertors in _COMPILED:
        matched = regex.match(path)
        if matched:
            return name, {key: convertors[key].convert(value) for key, value in matched.groupdict().items()}
    return None
