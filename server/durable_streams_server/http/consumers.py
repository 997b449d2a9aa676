"""Named consumers and deleted streams' tombstones in a root's ``__ds`` namespace, and the
server-wide consumer lag (``GET /v1/consumers``, its Prometheus gauges).

    PUT    __ds/consumers/{name}     record progress: {"offsets": {"<path>": "<offset>"}} (200)
    GET    __ds/consumers/{name}     the consumer's positions and lag
    DELETE __ds/consumers/{name}     forget the consumer (204)
    GET    __ds/tombstones/{path}    a deleted stream's end: incarnation, final offset (404: none kept)

``GET /v1/consumers`` answers ``{"consumers": [{"consumer", "stream", "offset",
"lag_messages", "lag_bytes", "lag_seconds"}]}`` for every position of every consumer on this
server whose stream the request's token may read (all of them without auth). The policy
(``policy.py``) lets any valid token ask; the list is filtered here with the token's grant.
What each field means: ``engine/consumers.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..engine.consumers import Consumer, Consumers, Lag
from ..engine.engine import Engine
from ..protocol.consumers import parse_progress, validate_consumer_name
from ..protocol.errors import MethodNotAllowed, NotFound
from ..protocol.subscriptions import validate_path
from ..protocol.tokens import AuthConfig, TokenGrant
from .limits import PRINCIPAL_KEY
from .policy import Need

NO_STORE = {"Cache-Control": "no-store"}
RESOURCES = ("consumers", "tombstones")

BodyReader = Callable[[Request], Awaitable[object]]


class ConsumerHandlers:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.consumers: Consumers = engine.consumers

    async def handle(
        self, request: Request, method: str, root: str, rest: list[str], bucketed: bool, body: BodyReader
    ) -> Response:
        """``rest``: the segments after ``__ds`` (``consumers/...`` or ``tombstones/...``);
        ``body`` reads a request's JSON body as the namespace does (``subscriptions``)."""
        kind, rest = rest[0], rest[1:]
        if kind == "tombstones":
            return self._tombstone(method, root, rest, bucketed)
        if len(rest) != 1:
            raise NotFound(f"no control resource {request.url.path!r}", code="NOT_FOUND")
        name = validate_consumer_name(rest[0])
        if method == "PUT":
            positions = parse_progress(await body(request), bucketed)
            consumer = await self.consumers.record(root, name, positions)
            return JSONResponse(self._describe(consumer), headers=NO_STORE)
        if method == "GET":
            return JSONResponse(self._describe(self.consumers.get(root, name)), headers=NO_STORE)
        if method == "DELETE":
            await self.consumers.delete(root, name)
            return Response(status_code=204)
        raise MethodNotAllowed(f"{method} is not supported on a consumer")

    def _describe(self, consumer: Consumer) -> dict[str, Any]:
        return {
            "consumer": consumer.name,
            "updated_at_ms": consumer.updated_ms,
            "streams": [_stream_lag(lag, consumer.root) for lag in self.consumers.lags(consumer)],
        }

    def _tombstone(self, method: str, root: str, rest: list[str], bucketed: bool) -> Response:
        if method != "GET":
            raise MethodNotAllowed(f"{method} is not supported on a tombstone; use GET")
        path = validate_path("/".join(rest), bucketed, "path")
        tombstone = self.engine.tombstones.lookup(root + path)
        if tombstone is None:
            raise NotFound(f"no tombstone of stream {path!r} is kept", code="TOMBSTONE_NOT_FOUND")
        return JSONResponse(tombstone.describe(path), headers=NO_STORE)

    def listing(self, request: Request, auth: AuthConfig | None) -> Response:
        """``GET /v1/consumers``: the lag of every position the token may read."""
        if request.method not in ("GET", "HEAD"):
            raise MethodNotAllowed(f"{request.method} is not supported on /v1/consumers; use GET")
        grant = _grant(request, auth)
        lags = [lag for lag in self.consumers.lags() if grant is None or _may_read(grant, lag.stream)]
        return JSONResponse({"consumers": [lag.to_json() for lag in lags]}, headers=NO_STORE)


def _stream_lag(lag: Lag, root: str) -> dict[str, Any]:
    described = lag.to_json()
    del described["consumer"]
    described["stream"] = lag.stream[len(root) :]
    return described


def _grant(request: Request, auth: AuthConfig | None) -> TokenGrant | None:
    """The token's grant (``None``: no auth configured); the policy let only a valid token in."""
    if auth is None:
        return None
    name = request.scope.get(PRINCIPAL_KEY)
    return next(grant for grant in auth.grants if grant.name == name)


def _may_read(grant: TokenGrant, stream: str) -> bool:
    return Need("read", "stream", stream).covered_by(grant)


def consumer_lag_metrics(consumers: Consumers) -> Iterator[Metric]:
    """``durable_streams_consumer_lag_{messages,bytes,seconds}{consumer,stream}``, computed now."""
    labels = ["consumer", "stream"]
    messages = GaugeMetricFamily(
        "durable_streams_consumer_lag_messages", "Messages a named consumer has not read yet", labels=labels
    )
    size = GaugeMetricFamily(
        "durable_streams_consumer_lag_bytes", "Bytes of the messages a named consumer has not read yet", labels=labels
    )
    seconds = GaugeMetricFamily(
        "durable_streams_consumer_lag_seconds",
        "Seconds from the last message a named consumer read to the stream's newest (0: caught up)",
        labels=labels,
    )
    for lag in consumers.lags():
        key = [lag.consumer, lag.stream]
        messages.add_metric(key, lag.messages)
        size.add_metric(key, lag.bytes)
        if lag.seconds is not None:
            seconds.add_metric(key, lag.seconds)
    yield from (messages, size, seconds)
