"""A cluster shard server's internal endpoints: tail reports for the base surface's subscriptions.

Served only with the cluster-internal credential (``credential``; 404 on a server that
has none, 403 for a request without it), reached through the node's router with
``?shard=k`` (relayed to shard ``k``'s server, ``cluster.node.router``). The protocol is
described in ``remote_streams``.

    GET  /v1/internal/interest?version=V&wait_ms=W   the base-surface subscriptions' interest
                                                     (long-poll: answered once not V, or after W)
    POST /v1/internal/reports                        a tail report to the home (200; 409 STALE_INTEREST)
         {"shard", "version", "full", "streams": [[path, tail, created_ms]...], "removed": [path...]}
    POST /v1/internal/matching                       this shard's streams an interest wants, with tails
         {"patterns": [...], "paths": [...]}  ->  {"shard", "streams": [[path, tail, created_ms]...]}
    POST /v1/internal/wake-events?path=P             wake events appended to this shard's stream
         (the JSON array of events; Producer-Id and    ``v1/stream/P`` as an idempotent producer (the
         Producer-Epoch headers, seq 0)                home's wake deliveries: ``cluster.shard.peers``)

The credential opens these routes only: a request on the public surface is checked against the
bearer tokens like any other, whatever it carries (``guard.ShardGuard.internal``).
"""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...engine.engine import Engine
from ...engine.types import AppendRequest
from ...http.limits import LiveReaders
from ...protocol.errors import BadRequest, MethodNotAllowed, NotFound
from ...protocol.headers import parse_producer
from .credential import require
from .guard import ShardGuard
from .remote_streams import BASE_ROOT, InterestView, matching_streams
from .shard_reports import ShardReports

MAX_WAIT_MS = 30_000
NO_STORE = {"Cache-Control": "no-store"}


class InternalHandlers:
    def __init__(self, engine: Engine, reports: ShardReports, guard: ShardGuard, live_readers: LiveReaders) -> None:
        self.engine = engine
        self.reports = reports
        self.guard = guard
        self._server_stops = live_readers.ending
        """Answers a waiting interest request when the server stops, as it answers
        the long-polls: a reporter's wait held a drained shard server's stop for up to its
        ``wait_ms``, the shard unavailable meanwhile."""

    async def handle(self, request: Request, rest: str) -> Response:
        guard = self.guard
        require(guard.secret, request.url.path, request.scope["headers"])
        if rest == "interest":
            _allow(request, "GET")
            return JSONResponse(await self._interest(request), headers=NO_STORE)
        if rest == "reports":
            _allow(request, "POST")
            self._report(await _body(request))
            return JSONResponse({"ok": True}, headers=NO_STORE)
        if rest == "matching":
            _allow(request, "POST")
            view = _interest_of(await _body(request))
            streams = matching_streams(self.engine, view)
            return JSONResponse({"shard": guard.shard, "streams": streams}, headers=NO_STORE)
        if rest == "wake-events":
            _allow(request, "POST")
            await self._wake_events(request)
            return Response(status_code=204, headers=NO_STORE)
        raise NotFound(f"no internal resource {request.url.path!r}", code="NOT_FOUND")

    async def _interest(self, request: Request) -> dict[str, object]:
        version = request.query_params.get("version", "")
        try:
            wait_ms = min(int(request.query_params.get("wait_ms", "0")), MAX_WAIT_MS)
        except ValueError:
            raise BadRequest("wait_ms must be an integer", code="INVALID_WAIT") from None
        view = await self.reports.interest.after(version, max(wait_ms, 0) / 1000, self._server_stops())
        return view.to_json()

    async def _wake_events(self, request: Request) -> None:
        path = request.query_params.get("path", "")
        given = request.headers
        producer = parse_producer(given.get("producer-id"), given.get("producer-epoch"), given.get("producer-seq"))
        if not path or producer is None:
            raise BadRequest("wake events need ?path= and the producer headers", code="INVALID_WAKE_EVENTS")
        body = await request.body()
        await self.engine.append(BASE_ROOT + path, AppendRequest(body, None, producer, None, False))

    def _report(self, body: object) -> None:
        refusal = BadRequest(
            'a report is {"shard", "version", "full", "streams": [[path, tail, created_ms]], "removed": [path]}',
            code="INVALID_REPORT",
        )
        if not isinstance(body, dict):
            raise refusal
        shard, version, full = body.get("shard"), body.get("version"), body.get("full")
        if not isinstance(shard, int) or not isinstance(version, str) or not isinstance(full, bool):
            raise refusal
        try:
            streams = [(str(path), int(tail), int(created)) for path, tail, created in body["streams"]]
            removed = [str(path) for path in body["removed"]]
        except (KeyError, TypeError, ValueError):
            raise refusal from None
        self.reports.apply(shard, version, full, streams, removed)


def _interest_of(body: object) -> InterestView:
    if not isinstance(body, dict):
        raise BadRequest('the body is {"patterns": [...], "paths": [...]}', code="INVALID_INTEREST")
    try:
        return InterestView.from_json({"version": "", **body})
    except ValueError as exc:
        raise BadRequest(str(exc), code="INVALID_INTEREST") from None


def _allow(request: Request, method: str) -> None:
    if request.method != method:
        raise MethodNotAllowed(f"{request.method} is not supported here; use {method}")


async def _body(request: Request) -> object:
    try:
        return json.loads(await request.body())
    except ValueError:
        raise BadRequest("the body must be JSON", code="INVALID_JSON") from None
