"""What the app leaves to the server it is assembled into: ports, each with a no-cluster default.

A server may be one shard of a cluster. What that changes at the HTTP surface is not this
layer's to know, so the app talks to it through these ports, implemented above the layers
(``cluster.shard``) and plugged in by the server's assembly (``server.py``) when the server runs
as a cluster's shard server; a single server runs with the defaults:

* ``Admission``: a request's first check, before auth (``request_policy``); none by default.
* ``InternalRoutes``: the answers of the routes that only a cluster uses (``routes``:
  ``cluster``, ``internal``), the background work behind them, and the creation of a fork whose
  source this server does not hold (``RemoteForks``: another shard's stream). By default
  (``NO_INTERNAL_ROUTES``) those routes do not exist (404) and every fork is local.
"""

from __future__ import annotations

from typing import Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from ..engine.types import CreateOutcome, CreateRequest
from ..protocol.errors import NotFound, ProtocolError


class Admission(Protocol):
    def refusal(self, scope: Scope) -> ProtocolError | None:
        """The refusal of a request this server must not serve (then answered instead of routed)."""
        ...

    def internal(self, scope: Scope) -> bool:
        """Whether the request is the server's own cluster's, on one of its internal routes (it
        needs no token there)."""
        ...


class RemoteForks(Protocol):
    def applies(self, request: CreateRequest) -> bool:
        """Whether ``request`` forks a stream this server does not hold."""
        ...

    async def create(self, request: CreateRequest) -> CreateOutcome: ...


class InternalRoutes(Protocol):
    @property
    def forks(self) -> RemoteForks | None: ...

    async def answer(self, route: str, request: Request) -> Response:
        """The answer of ``route`` (``cluster`` or ``internal``), or a ``ProtocolError``."""
        ...

    def start(self) -> None: ...

    async def close(self) -> None: ...


class _NoInternalRoutes:
    """A single server's: no internal route exists, every fork is local."""

    forks: RemoteForks | None = None

    async def answer(self, route: str, request: Request) -> Response:
        raise NotFound(f"no resource {request.url.path!r}", code="NOT_FOUND")

    def start(self) -> None:
        pass

    async def close(self) -> None:
        pass


NO_INTERNAL_ROUTES: InternalRoutes = _NoInternalRoutes()
