"""Whether a node's shard servers still answer: a hung one (alive, not answering: stopped,
deadlocked, swapping) would otherwise keep its lease forever, since the node renews the
lease, not the server.

Every tick the node asks each of its serving shard servers ``GET /healthz`` (liveness: it
answers whatever its storage's state), all at once, each with a short timeout
(``PROBE_TIMEOUT_S``). A server that has not answered for a lease ttl is killed; the node then
starts it again like any server that exited (``supervisor``: the same node takes its location back,
replaying its WAL), or lets the shard move if it cannot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import httpx

from .workers import ShardServer

log = logging.getLogger("durable_streams_server.cluster")
PROBE_TIMEOUT_S = 0.5
PROBE_THREADS = 8


def answers(client: httpx.Client, server: ShardServer) -> bool:
    try:
        return client.get(f"{server.url}/healthz", timeout=PROBE_TIMEOUT_S).status_code == 200
    except httpx.HTTPError:
        return False


class Liveness:
    """The probes of one node's shard servers, and since when each has not answered."""

    def __init__(self, client: httpx.Client) -> None:
        self._client = client
        self._pool = ThreadPoolExecutor(PROBE_THREADS, thread_name_prefix="cluster-probe")
        self._silent_since: dict[int, float] = {}  # pid -> when it first did not answer

    def kill_hung(self, servers: Mapping[int, ShardServer], after_s: float) -> list[int]:
        """Probe ``servers`` (shard -> server); kill those silent for ``after_s``; their shards."""
        replies = self._pool.map(lambda server: answers(self._client, server), servers.values())
        answered = dict(zip(servers, replies, strict=True))
        now = time.monotonic()
        pids = {server.proc.pid for server in servers.values()}
        self._silent_since = {pid: since for pid, since in self._silent_since.items() if pid in pids}
        killed = []
        for shard, server in servers.items():
            if answered[shard] or server.exited:
                self._silent_since.pop(server.proc.pid, None)
                continue
            since = self._silent_since.setdefault(server.proc.pid, now)
            if now - since >= after_s:
                log.error(
                    "shard server hung: it did not answer for a lease ttl, killed",
                    extra={"shard": shard, "pid": server.proc.pid, "silent_s": round(now - since, 1)},
                )
                server.proc.kill()
                killed.append(shard)
        return killed

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
