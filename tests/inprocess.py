"""Our server in this process: the app ``build_app`` builds, served by uvicorn on loopback
with the protocol class the CLI uses (``http_protocol``), in a thread. For tests that need the app's objects
(the app, its fast path) beside real HTTP; ``servers.ServerProcess`` runs the CLI instead."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import uvicorn
from servers import free_port, wait_for
from starlette.types import ASGIApp

from durable_streams_server import ServerConfig
from durable_streams_server.http.app import DurableStreamsApp
from durable_streams_server.http.fastpath import FastPath
from durable_streams_server.server import build_app, http_protocol


@dataclass(frozen=True)
class Served:
    """The objects of a server ``serving`` runs."""

    app: DurableStreamsApp
    fast_path: FastPath | None
    """The fast path the connection protocol was given (``None``: it has none)."""


@contextlib.contextmanager
def serving(
    config: ServerConfig,
    *,
    fast_path: bool = True,
    wrap: Callable[[ASGIApp], ASGIApp] | None = None,
    forwarded_allow_ips: str | None = None,
) -> Iterator[tuple[str, Served]]:
    """The server's URL and its objects. ``fast_path=False``: as ``--fast-path off`` (every
    request takes the app's path); ``wrap``: the app inside that middleware (the fast path then
    finds nothing to stand in for); ``forwarded_allow_ips``: as ``--forwarded-allow-ips``."""
    config = replace(config, fast_path="on" if fast_path else "off")
    app = build_app(config)
    protocol = http_protocol(app, config)
    served = Served(app, getattr(protocol, "fast_path", None))

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            wrap(app.asgi) if wrap is not None else app.asgi,
            host="127.0.0.1",
            port=port,
            log_config=None,
            http=protocol,
            loop="uvloop",
            forwarded_allow_ips=forwarded_allow_ips,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), timeout_s=60, interval_s=0.02)
        assert server.started, "the server did not start"
        yield f"http://127.0.0.1:{port}", served
    finally:
        server.should_exit = True
        thread.join(timeout=30)
