"""A shard server's view of the other shards, over HTTP through its node's router.

``RouterPeers`` is the other shards as the subscriptions' view of them (``shard_reports``) asks
them, on a shard server of a cluster of more than one shard (``serving``).
Every request goes to the node's router (``ShardGuard.router_url``) with the cluster-internal
credential (``credential``): the router relays ``/v1/internal/...?shard=k`` to shard
``k``'s server, and a stream URL to its shard's server, wherever that shard is served now.

* ``matching`` asks every other shard, concurrently, for its base-surface streams an interest
  wants, with their tails (``internal``); one that does not answer makes the whole
  question fail with 503 and ``Retry-After``: a subscription is never created missing a shard.
* ``append`` writes wake events to another shard's stream through that shard's internal
  route (``/v1/internal/wake-events``: the credential opens no public route), retrying while
  the shard is moving (503) or its server does not answer; the producer headers make a repeat
  a duplicate.
* ``start``/``noted``: on every shard but the home, the ``reporter.TailReporter``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import httpx

from ...protocol.errors import ProtocolError, ServiceUnavailable
from ..paths import shard_of_key
from .credential import CLUSTER_SECRET_HEADER, presenting
from .guard import ShardGuard
from .remote_streams import InterestView
from .reporter import TailReporter

if TYPE_CHECKING:
    from ...engine.engine import Engine
    from ...engine.types import VisibleStream

log = logging.getLogger("durable_streams_server.cluster")

HOME_KEY = "v1/__ds"
"""The shard key of the base surface's reserved namespace: its shard is the subscriptions' home."""
MATCHING_TIMEOUT_S = 10.0
APPEND_PATIENCE_S = 30.0


class RouterPeers:
    def __init__(self, guard: ShardGuard) -> None:
        self.guard = guard
        self.home = shard_of_key(HOME_KEY, guard.shards)
        self.headers = {CLUSTER_SECRET_HEADER: presenting(guard.secret)}
        self.client = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(MATCHING_TIMEOUT_S))
        self.reporter: TailReporter | None = None

    @property
    def shard(self) -> int:
        return self.guard.shard

    def shard_of(self, path: str) -> int:
        return shard_of_key("v1/" + path.split("/", 1)[0], self.guard.shards)

    def internal_url(self, resource: str) -> str:
        return f"{self.guard.router_url}/v1/internal/{resource}"

    async def matching(self, interest: InterestView) -> list[tuple[int, str, int, int]]:
        others = [shard for shard in range(self.guard.shards) if shard != self.shard]
        answers = await asyncio.gather(*(self._matching(shard, interest) for shard in others))
        return [(shard, *entry) for shard, entries in zip(others, answers, strict=True) for entry in entries]

    async def _matching(self, shard: int, interest: InterestView) -> list[tuple[str, int, int]]:
        body = {"patterns": list(interest.patterns), "paths": list(interest.paths)}
        try:
            answer = await self.client.post(
                self.internal_url("matching"), params={"shard": shard}, json=body, headers=self.headers
            )
            if answer.status_code == 200:
                return [(str(path), int(tail), int(created)) for path, tail, created in answer.json()["streams"]]
            why = f"it answered {answer.status_code}"
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            why = f"{type(exc).__name__}: {exc}"
        log.warning("a shard did not list its streams", extra={"shard": shard, "error": why})
        raise ServiceUnavailable(
            f"shard {shard} did not list its streams for the subscription ({why}); try again",
            code="SHARD_UNAVAILABLE",
            retry_after_s=1,
        )

    async def append(self, path: str, body: bytes, producer_id: str, epoch: int) -> None:
        url = self.internal_url("wake-events")
        params: dict[str, str | int] = {"shard": self.shard_of(path), "path": path}
        headers = {
            **self.headers,
            "Content-Type": "application/json",
            "Producer-Id": producer_id,
            "Producer-Epoch": str(epoch),
            "Producer-Seq": "0",
        }
        loop = asyncio.get_running_loop()
        deadline, delay = loop.time() + APPEND_PATIENCE_S, 0.1
        while True:
            try:
                answer = await self.client.post(url, params=params, content=body, headers=headers)
                if answer.status_code in (200, 204):
                    return
                why, status = f"it answered {answer.status_code}: {answer.text[:200]}", answer.status_code
            except httpx.HTTPError as exc:
                why, status = f"{type(exc).__name__}: {exc}", 503
            if status != 503 or loop.time() > deadline:
                raise ProtocolError(f"the wake stream's shard refused the wake events ({why})", code="WAKE_APPEND")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    def start(self, engine: Engine) -> None:
        if self.shard != self.home:
            self.reporter = TailReporter(self, engine)
            self.reporter.start()

    def noted(self, stream: VisibleStream, removed: bool) -> None:
        if self.reporter is not None:
            self.reporter.note(stream, removed)

    async def close(self) -> None:
        if self.reporter is not None:
            await self.reporter.close()
        await self.client.aclose()
