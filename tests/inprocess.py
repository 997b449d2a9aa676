"""Our server in this process: the app ``create_app`` builds, served by uvicorn on loopback
with the protocol class the CLI uses, in a thread. For tests that need the app's objects
(the app, its fast path) beside real HTTP; ``servers.ServerProcess`` runs the CLI instead."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from durable_streams_server import ServerConfig, create_app
from durable_streams_server.http.app import DurableStreamsApp
from durable_streams_server.http.fastpath.protocol import connection_protocol
from durable_streams_server.http.fastpath.route import FastPath
from durable_streams_server.http.gate import Gate


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Served:
    """The objects of a server ``serving`` runs."""

    app: DurableStreamsApp
    fast_path: FastPath | None
    """The fast path the connection protocol was given (``None``: it has none)."""


@contextlib.contextmanager
def serving(
    config: ServerConfig, *, fast_path: bool = True, wrap: Callable[[ASGIApp], ASGIApp] | None = None
) -> Iterator[tuple[str, Served]]:
    """The server's URL and its objects. ``fast_path=False``: every request takes the app's
    path; ``wrap``: the app inside that middleware (the fast path then finds nothing to stand in for)."""
    gate = create_app(config)
    assert isinstance(gate, Gate) and gate.fast_path is not None
    served = Served(gate.fast_path.app, gate.fast_path)  # type: ignore[arg-type]

    async def app_only(scope: Scope, receive: Receive, send: Send) -> None:
        await gate(scope, receive, send)

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            wrap(gate) if wrap is not None else gate if fast_path else app_only,
            host="127.0.0.1",
            port=port,
            log_config=None,
            http=connection_protocol("httptools", config.request_timeout_s, config.max_header_bytes),
            loop="uvloop",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", served
    finally:
        server.should_exit = True
        thread.join(timeout=30)
