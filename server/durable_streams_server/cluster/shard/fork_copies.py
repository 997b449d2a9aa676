"""A shard server's forks of other shards' streams: the export it asks for, the unlinks it sends.

The design is ``engine.copied_forks``'s (copy-on-fork across shards); this module is its
HTTP: a PUT whose ``Stream-Forked-From`` names a stream of another shard
(``ShardGuard``) asks that stream's shard, through this node's router (which relays the
cluster-internal route to wherever the shard is served), for an export
(``POST /v1/cluster/fork-links/<source path>``, answered by ``fork_exports``) and creates
the fork from it. The export is read as it arrives, holding at most
``ShardGuard.fork_max_bytes`` of messages: past that the PUT is refused with 409
``FORK_TOO_LARGE`` (and the link the source registered is removed again). A source's
error (404, 409, 400, 410) is answered as the source's shard gave it.

The sender of pending unlinks runs in the background: woken when one is recorded, and
retrying every ``RETRY_S`` while any fails (the source's shard moving or unreachable).
Every internal request carries the cluster's credential (``credential``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from urllib.parse import quote

import httpx

from ...engine.copied_forks import ForkCopy, Pending
from ...engine.engine import Engine
from ...engine.types import CreateOutcome, CreateRequest
from ...protocol import headers as h
from ...protocol.errors import ProtocolError, ServiceUnavailable
from ..paths import shard_of_path
from . import export_frames
from .credential import CLUSTER_SECRET_HEADER, presenting
from .guard import ShardGuard

log = logging.getLogger("durable_streams_server.http")

LINK_HEADER = "durable-streams-fork-link"
FORK_HEADER = "durable-streams-fork"
EXPORT_ROUTE = "/v1/cluster/fork-links/"
RETRY_S = 1.0


class SourceError(ProtocolError):
    """The source's shard's refusal, answered as it gave it."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message, code=code)
        self.status = status


class CrossShardForks:
    """The fork side of copied forks for one shard server (module docstring)."""

    def __init__(self, engine: Engine, guard: ShardGuard) -> None:
        self.engine = engine
        self.guard = guard
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=300.0))
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def applies(self, request: CreateRequest) -> bool:
        """Whether ``request`` forks a stream of another shard."""
        if request.fork_from is None:
            return False
        shard = shard_of_path("/" + request.fork_from, self.guard.shards)
        return shard is not None and shard != self.guard.shard

    def _url(self, source: str) -> str:
        return self.guard.router_url + EXPORT_ROUTE + quote(source, safe="/")

    def _headers(self) -> dict[str, str]:
        return {CLUSTER_SECRET_HEADER: presenting(self.guard.secret), "durable-streams-redirects": "relay"}

    # -- creating ---------------------------------------------------------------------

    async def create(self, request: CreateRequest) -> CreateOutcome:
        engine = self.engine
        engine.storage.check_writable()
        if engine.find(request.name) is not None:
            return await engine.create(request)  # a repeated PUT: compared with what exists
        assert request.fork_from is not None
        link = uuid.uuid4().hex  # (fresh per create: a re-created path's fork has another link)
        unlinks = engine.unlinks
        unlinks.in_flight.add(link)
        try:
            await engine.storage.wait_durable(unlinks.intend(request.name, request.fork_from, link))
            copy = await self._export(request, link)
            return await engine.create(request, copy)
        finally:
            unlinks.in_flight.discard(link)
            self.wake()

    async def _export(self, request: CreateRequest, link: str) -> ForkCopy:
        assert request.fork_from is not None
        headers = {**self._headers(), LINK_HEADER: link, FORK_HEADER: quote(request.name, safe="/")}
        if request.content_type is not None:
            headers["content-type"] = request.content_type
        if request.fork_offset is not None:
            headers[h.STREAM_FORK_OFFSET] = request.fork_offset.encode()
        if request.fork_sub_offset is not None:
            headers[h.STREAM_FORK_SUB_OFFSET] = str(request.fork_sub_offset)
        reader = export_frames.ExportReader(self.guard.fork_max_bytes)
        try:
            async with self._client.stream("POST", self._url(request.fork_from), headers=headers) as answer:
                if answer.status_code != 200:
                    raise _refusal(answer.status_code, await answer.aread())
                async for chunk in answer.aiter_raw():
                    reader.feed(chunk)
            meta, prefix, messages = reader.finish()
        except (httpx.HTTPError, export_frames.MalformedExport) as error:
            raise ServiceUnavailable(
                f"the shard of fork source {request.fork_from!r} did not answer whole: {error}",
                code="SOURCE_SHARD_UNAVAILABLE",
                retry_after_s=1,
            ) from None
        return ForkCopy(link, meta, prefix, messages)

    # -- unlinking --------------------------------------------------------------------

    def start(self) -> None:
        self._wake = asyncio.Event()
        self.engine.unlinks.on_added = self.wake
        self._task = asyncio.get_running_loop().create_task(self._send_unlinks())
        self.wake()  # (what recovery found)

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._client.aclose()

    async def _send_unlinks(self) -> None:
        assert self._wake is not None
        retry = False
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), RETRY_S if retry else None)
            self._wake.clear()
            retry = False
            for pending in self.engine.unlinks.due():
                try:
                    sent = await self._unlink(pending)
                except Exception:
                    log.exception("sending a fork's unlink failed; retrying")
                    sent = False
                retry = retry or not sent

    async def _unlink(self, pending: Pending) -> bool:
        """Remove ``pending``'s link at its source's shard unless a stream still holds it;
        whether it is done."""
        engine = self.engine
        held = engine.find(pending.fork)
        if held is None or held.fork_link != pending.link:
            try:
                answer = await self._client.delete(
                    self._url(pending.source), params={"link": pending.link}, headers=self._headers()
                )
            except httpx.HTTPError as error:
                log.info("a fork's unlink is pending: %s", error, extra={"fork": pending.fork})
                return False
            if not answer.is_success:
                log.info("a fork's unlink is pending: %s", answer.text[:200], extra={"fork": pending.fork})
                return False
        if pending.link not in engine.unlinks.in_flight:
            engine.unlinks.done(pending.link)
        return True


def _refusal(status: int, body: bytes) -> ProtocolError:
    try:
        error = httpx.Response(status, content=body).json()["error"]
        return SourceError(status, str(error["code"]), str(error["message"]))
    except (ValueError, KeyError, TypeError):
        return ServiceUnavailable(
            f"the fork source's shard answered {status}", code="SOURCE_SHARD_UNAVAILABLE", retry_after_s=1
        )
