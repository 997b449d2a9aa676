"""A node's router: every URL of the cluster answered at any node, by sending it to its shard.

The router serves no stream itself. A request for a stream is answered with a 307 to the
server of the stream's shard (``cluster.paths``), at the URL the shard's
lease publishes (``supervisor.Supervisor.routes``): the client repeats the same method and body
there, so every protocol feature works through any node, and the bytes never pass through
a second process. Requests a redirect cannot carry (credentials, which ``fetch`` drops on a
redirect to another origin; the ``__ds`` namespace, whose answers carry the node's URLs)
are relayed instead (``proxy``). A shard that is moving or starting is answered with 503
and ``Retry-After: 1``.

A fork goes to its own path's shard like any create; when its source is another shard's
stream, that shard's server copies what the fork inherits from the source's, through the
cluster-internal route (``/v1/cluster/fork-links/<source path>``, always relayed to the
source path's shard: ``cluster.shard.fork_copies``).

The base surface's subscriptions (``/v1/stream/__ds/...``) live in one shard, their home, like
any ``__ds`` path; the home learns the other shards' streams from their tail reports
(``cluster.shard.remote_streams``), sent through this router to the cluster's internal endpoints
(``/v1/internal/...?shard=k``, relayed to shard ``k``'s server like the status JSON).

``GET /healthz`` is the node's liveness, ``GET /readyz`` its readiness for a load balancer
(``_readiness``); ``GET /v1/cluster`` describes the cluster as this
node sees it (its live nodes, and every shard's state, server and holder).

The status page (``/ui``) is served by the router itself, so it works at any node; its JSON
(``/v1/status/<view>``), the consumers' listing (``/v1/consumers``) and the internal endpoints
are one shard server's, chosen by the ``shard`` query parameter (0 if none), and always
relayed, so the page's requests all stay on the node the browser asked.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from urllib.parse import parse_qs

from starlette.types import Receive, Scope, Send

from ...http.request_policy import decorate
from ...http.routes import match_route, route_path
from ...http.ui import page
from ...protocol.errors import (
    BadGateway,
    BadRequest,
    MethodNotAllowed,
    Moved,
    NotFound,
    ProtocolError,
    ServiceUnavailable,
    rendered,
)
from ..paths import shard_key, shard_of_key
from .proxy import READ_TIMEOUT_S, Relay, RelayFailure, must_relay
from .supervisor import Supervisor
from .upstream import IDLE_S

CLUSTER_PATH = "/v1/cluster"
_PER_SHARD = ("status", "consumers", "internal")
"""Routes a shard's server answers for its own shard only: the router relays them to one."""

Answer = tuple[int, dict[str, str], bytes]
"""A status, the headers and the JSON body of one of the router's own answers; an error's is its
one rendering (``protocol.errors.rendered``), as a server answers it."""


class ClusterRouter:
    """The node's ASGI app (module docstring); it starts and stops the node's supervisor."""

    def __init__(
        self,
        supervisor: Supervisor,
        on_started: Callable[[], object] | None = None,
        *,
        relay_read_timeout_s: float = READ_TIMEOUT_S,
        relay_idle_s: float = IDLE_S,
    ) -> None:
        self.supervisor = supervisor
        self.on_started = on_started
        self.relay = Relay(relay_read_timeout_s, relay_idle_s)
        self.accepting = False
        """Between the lifespan's startup and its shutdown (``/readyz``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        route = _route(scope)  # (once: a relayed request's cost is the router's own)
        if route == "ui":
            await _drain(receive)
            await _page(scope, send)
        else:
            status, headers, body = self.answer(scope, route)
            location = headers.get("Location") if status == 307 else None
            if location is not None and must_relay(scope, route in _RESERVED):
                failure = await self.relay.relay(scope, receive, send, location)
                if failure is None:
                    return
                status, headers, body = _relay_failed(failure)
            else:
                await _drain(receive)  # (a keep-alive connection stays usable after an unread body)
            await _respond(send, status, headers, body)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.supervisor.start()
                if self.on_started is not None:
                    self.on_started()
                self.accepting = True
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.accepting = False
                await self.relay.close()
                await asyncio.to_thread(self.supervisor.stop)
                await send({"type": "lifespan.shutdown.complete"})
                return

    def answer(self, scope: Scope, route: str | None) -> Answer:
        """The status, headers and JSON body answering one request (``route``: its path's, ``_route``)."""
        path = route_path(scope)
        if path == "/healthz":
            return _json(200, {}, {"status": "ok", "node_id": self.supervisor.settings.node_id})
        if path == "/readyz":
            return self._readiness()
        if path == CLUSTER_PATH:
            return _json(200, {}, self.describe())
        shards = self.supervisor.layout.shards
        if route in _PER_SHARD:
            return self._status_server(scope, shards)
        key = shard_key(path)
        if key is None:
            return _error(NotFound(f"no stream at {path} (the router serves streams, /healthz, {CLUSTER_PATH})"))
        return self._to_shard(scope, shard_of_key(key, shards))

    def _readiness(self) -> Answer:
        """Whether a load balancer should send this node requests: from its start to its shutdown
        it answers every URL (a shard that is moving with a 503 of its own); ``serving`` counts the
        shards it can send a request to now."""
        node_id = self.supervisor.settings.node_id
        serving = sum(1 for route in self.supervisor.routes if route.state == "serving")
        if not self.accepting:
            return _json(503, {"Retry-After": "1"}, {"status": "stopping", "node_id": node_id, "serving": serving})
        return _json(
            200,
            {},
            {"status": "ready", "node_id": node_id, "serving": serving, "shards": len(self.supervisor.routes)},
        )

    def _to_shard(self, scope: Scope, shard: int) -> Answer:
        """The 307 to the same URL at ``shard``'s server, or 503 while it has none."""
        route = self.supervisor.routes[shard]
        if route.state != "serving" or route.url is None:
            return _unavailable(f"shard {shard} is moving or starting")
        raw: bytes = scope.get("raw_path") or route_path(scope).encode()
        query: bytes = scope.get("query_string", b"")
        location = route.url + raw.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
        return _error(Moved(f"served at {location}", headers={"Location": location}))

    def _status_server(self, scope: Scope, shards: int) -> Answer:
        """Where ``/v1/status/...?shard=k`` (or ``/v1/consumers``) is answered: shard ``k``'s
        server (relayed)."""
        chosen = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("shard", ["0"])[-1]
        if not chosen.isascii() or not chosen.isdigit() or int(chosen) >= shards:
            return _error(BadRequest(f"shard must be an integer from 0 to {shards - 1}", code="INVALID_SHARD"))
        return self._to_shard(scope, int(chosen))

    def describe(self) -> dict[str, object]:
        supervisor = self.supervisor
        return {
            "node_id": supervisor.settings.node_id,
            "url": supervisor.settings.advertise_url,
            "durability": supervisor.settings.durability,
            "lease_ttl_s": supervisor.settings.lease_ttl_s,
            "live_nodes": list(supervisor.live_nodes),
            "held": list(supervisor.held),
            "shards": [
                {
                    "shard": shard,
                    "state": route.state,
                    "url": route.url,
                    "holder": route.holder,
                    "failed_start": supervisor.start_failures.describe(shard),
                }
                for shard, route in enumerate(supervisor.routes)
            ],
        }


def _json(status: int, headers: dict[str, str], body: object) -> Answer:
    return status, headers, json.dumps(body).encode()


def _error(error: ProtocolError) -> Answer:
    body, headers = rendered(error)
    return error.status, headers, body


def _unavailable(why: str) -> Answer:
    return _error(ServiceUnavailable(why, code="SHARD_UNAVAILABLE", retry_after_s=1))


def _relay_failed(failure: RelayFailure) -> Answer:
    """What a relay that got no answer says (``proxy``: sent or not)."""
    if not failure.sent:
        return _unavailable(f"its server did not answer ({failure.error})")
    message = f"the shard's server took the request but its answer was lost ({failure.error}): it may have been stored"
    return _error(BadGateway(message, code="RELAY_IN_DOUBT"))


def _route(scope: Scope) -> str | None:
    found = match_route(route_path(scope))
    return found[0] if found is not None else None


_RESERVED = ("control", "cluster", *_PER_SHARD)
"""Routes always relayed: the ``__ds`` namespace (``proxy``), the per-shard answers and the
cluster-internal route (its caller is a shard server that stays on its own node)."""


async def _page(scope: Scope, send: Send) -> None:
    """The status page's files (``http.ui.page``), as the server itself answers them."""
    if scope["method"] not in ("GET", "HEAD"):
        await _respond(send, *_error(MethodNotAllowed(f"{route_path(scope)} is read-only: GET and HEAD")))
        return
    path = route_path(scope)
    if path in ("/", "/ui"):
        await _respond(send, *_json(308, {"Location": "ui/"}, {}))  # (relative: from / and from /ui alike)
        return
    try:
        response = page.asset(path[len("/ui/") :])
    except NotFound as error:
        await _respond(send, *_error(error))
        return
    await send({"type": "http.response.start", "status": 200, "headers": decorate(response.raw_headers)})
    await send({"type": "http.response.body", "body": response.body if scope["method"] == "GET" else b""})


async def _drain(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


async def _respond(send: Send, status: int, headers: dict[str, str], payload: bytes) -> None:
    pairs = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"cache-control", b"no-store"),
        *((name.lower().encode(), value.encode("latin-1")) for name, value in headers.items()),
    ]
    pairs = decorate(pairs)
    await send({"type": "http.response.start", "status": status, "headers": pairs})
    await send({"type": "http.response.body", "body": payload})
