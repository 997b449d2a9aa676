"""Our server in this process: the app ``create_app`` builds, served by uvicorn on loopback
with the protocol class the CLI uses, in a thread. For tests that need the app's objects
(the gate, its lean path) beside real HTTP; ``servers.ServerProcess`` runs the CLI instead."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from durable_streams_server import ServerConfig, create_app
from durable_streams_server.http.connections import guarded_protocol
from durable_streams_server.http.gate import Gate


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def serving(
    config: ServerConfig, *, lean: bool = True, wrap: Callable[[ASGIApp], ASGIApp] | None = None
) -> Iterator[tuple[str, Gate]]:
    """The server's URL and its gate. ``lean=False``: the gate wrapped in a plain ASGI function,
    so the protocol does not find its lean path (every request takes the app's path);
    ``wrap``: the gate inside that middleware."""
    gate = create_app(config)
    assert isinstance(gate, Gate)

    async def app_only(scope: Scope, receive: Receive, send: Send) -> None:
        await gate(scope, receive, send)

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            wrap(gate) if wrap is not None else gate if lean else app_only,
            host="127.0.0.1",
            port=port,
            log_config=None,
            http=guarded_protocol("httptools", config.request_timeout_s, config.max_header_bytes),
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
        yield f"http://127.0.0.1:{port}", gate
    finally:
        server.should_exit = True
        thread.join(timeout=30)
