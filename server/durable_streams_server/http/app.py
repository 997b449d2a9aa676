"""The ASGI application: routes, error mapping, and the storage lifecycle.

``DurableStreamsApp`` gets a starter that opens storage + engine, recovers their state and
assembles the handlers over them (``started.py``; ``server.py`` builds it from a
``ServerConfig``); its ``asgi`` app (the gate in front of a Starlette router, see ``gate.py``)
can be mounted inside the user's own ASGI application. The routing shell exists at once;
starting calls the starter once and keeps the ``Started`` it returns, which every route is
handed (``_guarded``); stopping closes it (the final flush). Mounted apps do not get their own
lifespan events from Starlette, so the app also starts itself on its first request; without
the shutdown event nothing is lost (the WAL is the durable copy), the final flush simply
happens at the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope

from ..protocol.errors import BadRequest, MethodNotAllowed, NotFound, ProtocolError, ServiceUnavailable
from ..protocol.ids import (
    BASE_SURFACE_PREFIX,
    validate_base_path,
    validate_bucket_id,
    validate_raw_path,
    validate_stream_id,
)
from ..protocol.subscriptions import RESERVED_SEGMENT
from ..protocol.tokens import AuthConfig
from .answers import Answer
from .gate import Gate
from .limits import HttpLimits, LiveReaders, RequestLimits
from .metrics import ROUTE_KEY, STREAM_ROUTE, ServerMetrics
from .ports import Admission
from .read_plans import wants_plan
from .request_policy import RequestPolicy
from .responses import error_response, http_error_response, preflight_response
from .retention import change_retention
from .routes import READY_PID_HEADER, route_path, starlette_routes
from .started import Started, Starter
from .state_metrics import StateCollector
from .targets import base_target
from .time_lookup import wants_time_lookup
from .ui.status import StatusPage

log = logging.getLogger("durable_streams_server.http")

_BASE_ROOT = "/" + BASE_SURFACE_PREFIX
_RESERVED_ROOT = RESERVED_SEGMENT + "/"


def _base_rest(scope: Scope) -> str | None:
    """The path after ``/v1/stream/`` when the ``base`` route serves it."""
    path = route_path(scope)
    if not path.startswith(_BASE_ROOT):
        return None
    rest = path[len(_BASE_ROOT) :]
    if rest == RESERVED_SEGMENT or rest.startswith(_RESERVED_ROOT) or "\n" in rest:
        return None  # the control route; a newline the route's pattern would not match
    return rest


_PID = str(os.getpid())

_REMEMBERED_PATHS = 1024
_REMEMBERED_PATH_BYTES = 256
"""``stream_target`` remembers the answers for up to this many paths of up to this length."""

Route = Callable[[Started], Awaitable[Response]]
"""A route's work once the app has started (``_guarded`` starts it)."""


class DurableStreamsApp:
    """Owns the storage and engine for one server; its ``asgi`` attribute is the app."""

    def __init__(
        self,
        starter: Starter,
        limits: HttpLimits,
        live_readers: LiveReaders,
        auth: AuthConfig | None = None,
        on_started: Callable[[], object] | None = None,
        admission: Admission | None = None,
    ) -> None:
        self._starter = starter
        self.on_started = on_started
        """Called once the app has started (storage recovered and running): the standalone
        server's (``cli.main``) freezes what start-up built (``collector.py``)."""
        self.started: Started | None = None
        """What the app serves with once it has started (``_start``); ``None`` until then."""
        self._start_lock = asyncio.Lock()
        self._stream_names: dict[tuple[bytes, str, str], str | None] = {}
        """``stream_target``'s answers by raw path, decoded path and root path."""
        self.live_readers = live_readers
        self.metrics = ServerMetrics(live_readers)
        self.status_page = StatusPage(self.metrics, live_readers, auth, self._guarded)
        """``/ui`` and ``/v1/status/...``: the status page (``ui/``)."""
        self.router = Starlette(
            routes=starlette_routes(
                {
                    "healthz": self._healthz,
                    "readyz": self._readyz,
                    "metrics": self._metrics,
                    "files": self._files_endpoint,
                    "consumers": self._consumers_endpoint,
                    "ui": self.status_page.page,
                    "status": self.status_page.status,
                    "cluster": self._cluster_endpoint,
                    "internal": self._internal_endpoint,
                    "control": self._control_endpoint,
                    "base": self._base_endpoint,
                    "bucket": self._bucket_endpoint,
                    "listing": self._listing_endpoint,
                    "bucketed": self._bucketed_endpoint,
                }
            ),
            exception_handlers={HTTPException: http_error_response},
            lifespan=self._lifespan,
        )
        self.policy = RequestPolicy(
            auth,
            RequestLimits(
                max_header_bytes=limits.max_header_bytes,
                rate_limit_rps=limits.rate_limit_rps,
                rate_limit_burst=limits.rate_limit_burst,
            ),
            self.metrics,
            live_readers,
            admission,
        )
        """Admit, observe, decorate: what every request passes, on either path (``request_policy.py``)."""
        self.asgi = Gate(self.router, self.base_route, self.policy)
        """The ASGI app: the gate in front of the router (see ``gate.py``)."""

    @contextlib.asynccontextmanager
    async def _lifespan(self, _: Starlette) -> AsyncIterator[None]:
        started = await self._start()
        try:
            yield
        finally:
            await started.close()
            log.info("stopped")

    async def _start(self) -> Started:
        """The app started: at the first call, storage opened, recovered and running, the
        handlers assembled over it (``Started``); every later call, the same."""
        async with self._start_lock:
            if self.started is None:
                self.started = started = self._starter(self.metrics)
                self.metrics.registry.register(StateCollector(started))
                await started.start()
                if self.on_started is not None:
                    self.on_started()
            return self.started

    # -- routing ----------------------------------------------------------------------

    async def base_route(self, scope: Scope, receive: Receive) -> Response | None:
        """The router's ``base`` route without the router: the request's response, or
        ``None`` for a path another route serves (the gate then routes it)."""
        rest = _base_rest(scope)
        return await self._base(Request(scope, receive), rest) if rest is not None else None

    def stream_target(self, scope: Scope) -> str | None:
        """The stream of the base surface a request addresses itself (not a sub-resource): a started
        app and a valid path; ``None``: the request is the router's. The fast path asks it of every
        request it might serve (``fastpath.route``). Remembered per path for the paths of recent
        requests: a busy stream's requests all have the same, and checking a path again is work
        first-touched after an idle moment (bench/README.md)."""
        if self.started is None:
            return None
        raw_path: bytes = scope.get("raw_path", b"")
        key = (raw_path, scope["path"], scope.get("root_path", ""))
        if key in self._stream_names:
            return self._stream_names[key]
        name = self._stream_name(scope)
        if len(raw_path) <= _REMEMBERED_PATH_BYTES:
            if len(self._stream_names) >= _REMEMBERED_PATHS:
                self._stream_names.clear()
            self._stream_names[key] = name
        return name

    def _stream_name(self, scope: Scope) -> str | None:
        rest = _base_rest(scope)
        if rest is None:
            return None
        name = BASE_SURFACE_PREFIX + rest
        if base_target(name)[1] is not None:
            return None  # a sub-resource
        try:
            validate_raw_path(scope.get("raw_path", b""))
            validate_base_path(name)
        except ProtocolError:
            return None  # the app answers it, as always
        return name

    async def _base_endpoint(self, request: Request) -> Response:
        return await self._base(request, request.path_params["path"])

    async def _base(self, request: Request, path: str) -> Response:
        """``/v1/stream/{path}``: a stream, or a sub-resource of one (see ``base_target``)."""
        name = BASE_SURFACE_PREFIX + path
        stream, resource, token = base_target(name)
        request.scope[ROUTE_KEY] = resource or STREAM_ROUTE

        async def route(started: Started) -> Response:
            validate_raw_path(request.scope.get("raw_path", b""))
            validate_base_path(name)
            if resource is not None:
                return await _sub_resource(started, request, stream, resource, token)
            return await _stream(started, request, name)

        return await self._guarded(request, route)

    async def _files_endpoint(self, request: Request) -> Response:
        request.scope[ROUTE_KEY] = "files"

        async def route(started: Started) -> Response:
            return await started.read_plans.file(request, request.path_params["path"])

        return await self._guarded(request, route)

    async def _cluster_endpoint(self, request: Request) -> Response:
        request.scope[ROUTE_KEY] = "cluster"

        async def route(started: Started) -> Response:
            return await started.internal.answer("cluster", request)

        return await self._guarded(request, route)

    async def _consumers_endpoint(self, request: Request) -> Response:
        request.scope[ROUTE_KEY] = "consumers"

        async def route(started: Started) -> Response:
            return started.subscriptions.consumers.listing(request, self.policy.auth)

        return await self._guarded(request, route)

    async def _internal_endpoint(self, request: Request) -> Response:
        request.scope[ROUTE_KEY] = "internal"

        async def route(started: Started) -> Response:
            return await started.internal.answer("internal", request)

        return await self._guarded(request, route)

    async def _bucket_endpoint(self, request: Request) -> Response:
        bucket_id = request.path_params["bucket_id"]
        request.scope[ROUTE_KEY] = "bucket"

        async def route(started: Started) -> Response:
            validate_bucket_id(bucket_id)
            if request.method == "PUT":
                return await started.extensions.create_bucket(bucket_id, request.headers)
            if request.method in ("GET", "HEAD"):
                return started.extensions.get_bucket(bucket_id)
            if request.method == "DELETE":
                return await started.extensions.delete_bucket(bucket_id)
            raise MethodNotAllowed(f"{request.method} is not supported on a bucket")

        return await self._guarded(request, route)

    async def _control_endpoint(self, request: Request) -> Response:
        """``{root}/__ds/...``: the root's subscriptions (never a stream named __ds); the root
        is the base surface, or a bucket when the path names one."""
        params = request.path_params
        bucket_id = params.get("bucket_id")
        rest = params.get("rest")
        request.scope[ROUTE_KEY] = "subscriptions"

        async def route(started: Started) -> Response:
            validate_raw_path(request.scope.get("raw_path", b""))
            if bucket_id is not None:
                started.engine.buckets.get(validate_bucket_id(bucket_id))
            root = BASE_SURFACE_PREFIX if bucket_id is None else bucket_id + "/"
            segments = rest.split("/") if rest is not None else []
            return await started.subscriptions.handle(request, root, segments, bucket_id is not None)

        return await self._guarded(request, route)

    async def _listing_endpoint(self, request: Request) -> Response:
        bucket_id = request.path_params["bucket_id"]
        request.scope[ROUTE_KEY] = "listing"

        async def route(started: Started) -> Response:
            validate_bucket_id(bucket_id)
            if request.method not in ("GET", "HEAD"):
                raise MethodNotAllowed("the stream listing is read-only ('streams' is a reserved stream id)")
            return started.extensions.list_streams(request, bucket_id)

        return await self._guarded(request, route)

    async def _bucketed_endpoint(self, request: Request) -> Response:
        params = request.path_params
        resource = params.get("resource")
        request.scope[ROUTE_KEY] = resource if resource in ("snapshot", "bootstrap") else "bucketed_stream"

        async def route(started: Started) -> Response:
            bucket_id = validate_bucket_id(params["bucket_id"])
            raw_path = request.scope.get("raw_path", b"")
            if b"%2f" in raw_path.lower():
                # Decoded before routing, an encoded slash would look like a sub-resource.
                raise BadRequest("a stream id must not contain '/' (also not as %2F)", code="INVALID_STREAM_ID")
            validate_raw_path(raw_path)
            name = validate_stream_id(bucket_id, params["stream_id"])
            started.engine.buckets.get(bucket_id)
            if resource is None:
                return await _stream(started, request, name)
            if resource not in ("snapshot", "bootstrap") or (resource == "bootstrap" and "token" in params):
                raise NotFound(f"no resource {request.url.path!r}", code="NOT_FOUND")
            return await _sub_resource(started, request, name, resource, params.get("token"))

        return await self._guarded(request, route)

    # -- probes and metrics -------------------------------------------------------------

    @staticmethod
    def _probe_refusal(request: Request, label: str) -> Response | None:
        request.scope[ROUTE_KEY] = label
        if request.method in ("GET", "HEAD"):
            return None
        return error_response(MethodNotAllowed(f"{request.url.path} answers GET and HEAD only"))

    async def _healthz(self, request: Request) -> Response:
        """Liveness: the process serves requests (storage may still be starting or degraded)."""
        if (refusal := self._probe_refusal(request, "health")) is not None:
            return refusal
        return JSONResponse({"status": "ok"}, headers={"Cache-Control": "no-store"})

    async def _readyz(self, request: Request) -> Response:
        """Readiness: started, and storage can make progress; else 503 with the reason."""
        if (refusal := self._probe_refusal(request, "ready")) is not None:
            return refusal
        try:
            started = await self._start()
        except Exception as exc:  # recovery failed; the next probe tries again
            log.warning("not ready: start failed", exc_info=exc)
            reason: str | None = f"the server cannot start: {exc}"
        else:
            reason = started.storage.degraded
        if reason is not None:
            return error_response(ServiceUnavailable(reason, code="NOT_READY", headers={"Retry-After": "5"}))
        return JSONResponse({"status": "ready"}, headers={"Cache-Control": "no-store", READY_PID_HEADER: _PID})

    async def _metrics(self, request: Request) -> Response:
        if (refusal := self._probe_refusal(request, "metrics")) is not None:
            return refusal
        return self.metrics.response()

    async def _guarded(self, request: Request, route: Route) -> Response:
        """Start on first use, answer CORS preflights, and turn protocol errors into responses."""
        started = self.started
        if started is None:
            started = await self._start()
        if request.method == "OPTIONS":
            return preflight_response()
        try:
            return await route(started)
        except ProtocolError as error:
            return error_response(error)


async def _stream(started: Started, request: Request, name: str) -> Response:
    handlers = started.streams
    method = request.method
    if method == "GET" and wants_plan(request.headers.get("accept")):
        return await started.read_plans.plan(request, name)
    if method == "GET" and wants_time_lookup(request.headers.get("accept")):
        return await started.time_lookups.lookup(request, name)
    if method == "GET":
        return _response(await handlers.read(request, name))
    if method == "HEAD":
        return (await handlers.head(name)).response()
    if method == "PUT":
        return await handlers.create(request, name)
    if method == "POST":
        return await handlers.append(request, name)
    if method == "DELETE":
        return await handlers.delete(name)
    if method == "PATCH":
        return await change_retention(started.engine, request, name)
    raise MethodNotAllowed(f"{method} is not supported on a stream")


async def _sub_resource(started: Started, request: Request, name: str, resource: str, token: str | None) -> Response:
    extensions = started.extensions
    method = "GET" if request.method == "HEAD" else request.method  # HEAD: GET without a body
    if resource == "bootstrap" and method == "GET":
        return await extensions.bootstrap(request, name)
    if resource == "snapshot" and token is None and method == "GET":
        return extensions.latest_snapshot(request, name)
    if resource == "snapshot" and token is not None:
        if method == "PUT":
            return await extensions.publish_snapshot(request, name, token)
        if method == "GET":
            return await extensions.read_snapshot(name, token)
        if method == "DELETE":
            return extensions.delete_snapshot(name, token)
    raise MethodNotAllowed(f"{method} is not supported on {request.url.path}")


def _response(answer: Response | Answer) -> Response:
    """A handler's answer as the app answers (``answers.Answer``: the fast path writes it as it is)."""
    return answer.response() if isinstance(answer, Answer) else answer
