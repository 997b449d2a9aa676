"""uvicorn's h11 connection handling, plus a deadline for every request head.

uvicorn times out a connection only while it idles *after* a response (keep-alive). A
client that connects and sends nothing, or dribbles a request head a byte at a time,
would hold its connection -- and a ``--max-connections`` slot -- forever. Here a request
head must be complete within ``head_timeout_s`` of the connection opening or of the
previous response; otherwise the connection is closed (there is no request to answer).
Bodies have their own deadline in the app (``limits.BodyDeadline``: 408).

The server always runs this h11 protocol (not httptools): h11 also enforces
``--max-header-bytes`` on incomplete heads, which httptools cannot be told to.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState


class GuardedH11Protocol(H11Protocol):
    head_timeout_s: ClassVar[float] = 30.0

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._head_timer: asyncio.TimerHandle | None = None
        self._scope_before: object = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self._head_timer is not None and self.scope is not self._scope_before:
            self._stop_head_timer()  # a new request head was parsed

    def on_response_complete(self) -> None:
        self._await_head()  # before super(): it may parse a pipelined head at once
        super().on_response_complete()

    def _await_head(self) -> None:
        self._stop_head_timer()
        self._scope_before = self.scope
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_late)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def guarded_h11(head_timeout_s: float) -> type[GuardedH11Protocol]:
    """The protocol class to hand to uvicorn (which instantiates it per connection)."""

    class Configured(GuardedH11Protocol):
        pass

    Configured.head_timeout_s = head_timeout_s
    return Configured
