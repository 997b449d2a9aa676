"""Tail reports from one shard server to the subscriptions' home (``remote_streams``).

Two tasks on the shard server's loop:

* the **interest watcher** long-polls the home's interest (``GET /v1/internal/interest``
  through the node's router, ``?shard=<home>``), on the version it holds; on a new version it
  keeps it and asks for a full report. A failure (the home moving or restarting: 503, a
  dropped connection) is retried with backoff from 0.1 s to 2 s. A restarted home publishes a
  new version, so every reporter sends it a full report.
* the **sender** waits for something to report, lets ~20 ms of changes gather (``COALESCE_S``:
  one POST per window per shard, however many appends), then POSTs either a full report
  (every local stream the interest wants, at its visible tail) or the changes noted since the
  last one (newest per path). One report is in flight at a time; a failed one is merged back
  (a newer change of a path wins) and retried with backoff until the home acknowledges it.
  A 409 ``STALE_INTEREST`` drops it: the watcher's next version brings a full report.

``note`` is called by the subscription manager's stream hooks (``on_visible``,
``on_removed``): a new durable tail or a removal of a local base-surface stream the interest
wants.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

import httpx

from .remote_streams import BASE_ROOT, InterestView, matching_streams

if TYPE_CHECKING:
    from ...engine.engine import Engine
    from ...engine.types import VisibleStream

log = logging.getLogger("durable_streams_server.cluster")

COALESCE_S = 0.02
LONG_POLL_MS = 4_000
"""Shorter than a shard server's graceful shutdown (5 s): a home that moves is not held up by
its reporters' long-polls (one request per shard per 4 s through the router while idle)."""
BACKOFF_S = (0.1, 2.0)


class Home(Protocol):
    """What the reporter needs of ``peers.RouterPeers``."""

    client: httpx.AsyncClient
    home: int
    headers: dict[str, str]

    @property
    def shard(self) -> int: ...

    def internal_url(self, resource: str) -> str: ...


class TailReporter:
    def __init__(self, home: Home, engine: Engine) -> None:
        self.home = home
        self.engine = engine
        self.interest: InterestView | None = None
        self.pending: dict[str, tuple[int, int] | None] = {}
        """Changes since the last report: path -> (tail, created_ms), or ``None``: removed."""
        self.full = False
        self.wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._watch()), loop.create_task(self._send())]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def note(self, stream: VisibleStream, removed: bool) -> None:
        interest, name = self.interest, stream.name
        if interest is None or not name.startswith(BASE_ROOT) or not interest.wants(name[len(BASE_ROOT) :]):
            return
        self.pending[name[len(BASE_ROOT) :]] = None if removed else (stream.visible_tail, stream.created_ms)
        self.wake.set()

    async def _watch(self) -> None:
        version, delay = "", BACKOFF_S[0]
        params: dict[str, str | int] = {"shard": self.home.home, "wait_ms": LONG_POLL_MS}
        timeout = httpx.Timeout(LONG_POLL_MS / 1000 + 10)
        while True:
            try:
                answer = await self.home.client.get(
                    self.home.internal_url("interest"),
                    params={**params, "version": version},
                    headers=self.home.headers,
                    timeout=timeout,
                )
                if answer.status_code != 200:
                    raise ValueError(f"the home answered {answer.status_code}")
                view = InterestView.from_json(answer.json())
            except (httpx.HTTPError, ValueError) as exc:
                log.debug("interest not fetched", extra={"error": str(exc)})
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_S[1])
                continue
            delay = BACKOFF_S[0]
            if view.version != version:
                version, self.interest, self.full = view.version, view, True
                self.pending.clear()
                self.wake.set()

    async def _send(self) -> None:
        delay = BACKOFF_S[0]
        while True:
            await self.wake.wait()
            await asyncio.sleep(COALESCE_S)
            self.wake.clear()
            interest = self.interest
            if interest is None or not (self.full or self.pending):
                continue
            full, batch = self.full, self.pending
            self.full, self.pending = False, {}
            streams = matching_streams(self.engine, interest) if full else []
            streams += [(path, *change) for path, change in batch.items() if change is not None]
            body = {
                "shard": self.home.shard,
                "version": interest.version,
                "full": full,
                "streams": streams,
                "removed": [path for path, change in batch.items() if change is None],
            }
            status = await self._post(body)
            if status in (200, 409):  # (409: stale; the watcher brings the next version, and a full report)
                delay = BACKOFF_S[0]
                continue
            if interest is self.interest:
                self.full = self.full or full
                self.pending = {**batch, **self.pending}
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_S[1])
            self.wake.set()

    async def _post(self, body: dict[str, object]) -> int:
        try:
            answer = await self.home.client.post(
                self.home.internal_url("reports"),
                params={"shard": self.home.home},
                json=body,
                headers=self.home.headers,
            )
        except httpx.HTTPError as exc:
            log.debug("tail report not delivered", extra={"error": str(exc)})
            return 0
        return answer.status_code
