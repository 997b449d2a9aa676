"""The ASGI application: routes, error mapping, and the storage lifecycle.

``create_app(config)`` returns a Starlette app that users can mount inside their own
ASGI application; starting it recovers state from Delta + WAL, stopping it flushes.
Mounted apps do not get their own lifespan events from Starlette, so the server also
starts itself on its first request; without the shutdown event nothing is lost (the WAL
is the durable copy), the final flush simply happens at the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..config import ServerConfig
from ..engine.engine import Engine, EngineConfig
from ..protocol.errors import MethodNotAllowed, ProtocolError
from ..storage.committer import Storage, StorageConfig
from .limits import HttpLimits
from .responses import SecurityHeadersMiddleware, error_response, preflight_response
from .streams import StreamHandlers

log = logging.getLogger("durable_streams_server.http")

BASE_PREFIX = "v1/stream/"


class DurableStreamsApp:
    """Owns the storage and engine for one server; its ``asgi`` attribute is the app."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.storage: Storage | None = None
        self.engine: Engine | None = None
        self.handlers: StreamHandlers | None = None
        self._start_lock = asyncio.Lock()
        self.asgi = Starlette(
            routes=[
                Route(
                    "/v1/stream/{path:path}",
                    self._stream_endpoint,
                    methods=["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS"],
                )
            ],
            middleware=[Middleware(SecurityHeadersMiddleware)],
            lifespan=self._lifespan,
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, _: Starlette) -> AsyncIterator[None]:
        await self._start()
        try:
            yield
        finally:
            if self.storage is not None:
                await self.storage.close()
            log.info("stopped")

    async def _start(self) -> None:
        async with self._start_lock:
            if self.handlers is None:
                self._start_now()
                assert self.storage is not None
                await self.storage.start()

    def _start_now(self) -> None:
        config = self.config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        storage = Storage(
            StorageConfig(
                data_dir=config.data_dir,
                storage_uri=config.resolved_storage_uri,
                storage_options=config.storage_options,
                durability=config.durability,
                flush_interval_s=config.flush_interval_ms / 1000,
            )
        )
        engine = Engine(storage, EngineConfig(tail_cache_bytes=config.tail_cache_bytes))
        engine.load(storage.recover())
        self.storage, self.engine = storage, engine
        self.handlers = StreamHandlers(
            engine,
            HttpLimits(
                max_body_bytes=config.max_body_bytes,
                max_read_bytes=config.max_read_bytes,
                long_poll_timeout_s=config.long_poll_timeout_ms / 1000,
                sse_reconnect_s=config.sse_reconnect_ms / 1000,
            ),
        )
        log.info(
            "ready",
            extra={
                "storage_uri": config.resolved_storage_uri,
                "durability": config.durability,
                "streams": len(engine.streams),
            },
        )

    async def _stream_endpoint(self, request: Request) -> Response:
        name = BASE_PREFIX + request.path_params["path"]
        return await self._dispatch(request, name)

    async def _dispatch(self, request: Request, name: str) -> Response:
        if self.handlers is None:
            await self._start()
        handlers = self.handlers
        assert handlers is not None
        method = request.method
        routes: dict[str, Callable[[], Awaitable[Response]]] = {
            "GET": lambda: handlers.read(request, name),
            "HEAD": lambda: handlers.head(name),
            "PUT": lambda: handlers.create(request, name),
            "POST": lambda: handlers.append(request, name),
            "DELETE": lambda: handlers.delete(name),
        }
        try:
            if method == "OPTIONS":
                return preflight_response()
            route = routes.get(method)
            if route is None:
                raise MethodNotAllowed(f"{method} is not supported on a stream")
            return await route()
        except ProtocolError as error:
            return error_response(error)


def create_app(config: ServerConfig | None = None) -> Starlette:
    """An ASGI app serving the Durable Streams protocol with the given configuration."""
    return DurableStreamsApp(config or ServerConfig()).asgi
