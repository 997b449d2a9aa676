"""Relayed requests while their shard moves: a node relays appends and long-polls to its own
shard server, then (after a second node joins and takes the shard) to the other node's. The
relay's pooled connections to the drained server end with it; what was in flight is answered
(a 503 with ``Retry-After`` when it never reached a server, a 502 ``RELAY_IN_DOUBT`` when it
may have), never a dropped connection, and the long-poll readers read everything the
appenders were acknowledged, in order, once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from cluster_support import JSON, ProducerAppender, check_history, name_in_shard, serving, start_node
from servers import ServerProcess, wait_for

from durable_streams_server.cluster.node.proxy import FOLLOWS_HEADER

pytestmark = pytest.mark.slow

RELAY = {FOLLOWS_HEADER: "relay"}
LONG_POLL = ("--long-poll-timeout-ms", "3000")
"""The nodes' long-poll timeout: the readers' last polls, parked at the tail once the appends
have stopped, end within it (at the default 30 s the test waited them out)."""
POLL_TIMEOUT_S = 15
"""Longer than the servers' long-poll timeout: a poll at the tail is answered ``204`` then, never
cut short by the client's own timeout first (a race it lost now and then)."""


class LongPollReader(threading.Thread):
    """Follows a JSON stream with long-polls through one node, asking to be relayed; notes
    every status (and every dropped connection) it met."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.values: list[int] = []
        self.statuses: dict[str, int] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        http = requests.Session()
        http.trust_env = False
        offset = "-1"
        while not self.stopping.is_set():
            try:
                params = {"offset": offset, "live": "long-poll"}
                answer = http.get(self.url, params=params, headers=RELAY, timeout=POLL_TIMEOUT_S, allow_redirects=False)
            except requests.RequestException as exc:
                self._note(type(exc).__name__)
                time.sleep(0.05)  # (a backoff before the retry)
                continue
            status = answer.status_code
            if status == 503 and answer.headers.get("Retry-After") == "1":
                self._note("503 Retry-After")
            elif status == 502 and answer.json()["error"]["code"] == "RELAY_IN_DOUBT":
                self._note("502 RELAY_IN_DOUBT")
            else:
                self._note(str(status))
            if status == 200:
                self.values += [item["n"] for item in answer.json()]
            if status in (200, 204):
                offset = answer.headers["Stream-Next-Offset"]
            else:
                time.sleep(0.05)  # (a backoff before the retry)

    def _note(self, what: str) -> None:
        self.statuses[what] = self.statuses.get(what, 0) + 1


def test_relayed_appends_and_long_polls_cross_a_shard_move(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "2", "--lease-ttl-s", "2"]
    front = start_node(server_factory, storage, "n0", tmp_path, *LONG_POLL)
    wait_for(serving([front], 2), timeout_s=60)
    names = [name_in_shard(shard, 2, "relayed") for shard in range(2)]  # (whichever shard moves)
    urls = [f"{front.url}/v1/stream/{name}" for name in names]
    for url in urls:
        assert requests.put(url, headers=JSON, timeout=30).status_code == 201
    appenders = [ProducerAppender(url, f"p-{index}", 100_000) for index, url in enumerate(urls)]
    readers = [LongPollReader(url) for url in urls]
    for worker in [*appenders, *readers]:
        worker.start()
    wait_for(lambda: all(len(appender.acknowledged) >= 20 for appender in appenders), timeout_s=120)

    joined = start_node(server_factory, storage, "n1", tmp_path, *LONG_POLL)
    wait_for(lambda: len(joined.shards_held()) == 1 and serving([front, joined], 2)(), timeout_s=60)
    counts = [len(appender.acknowledged) for appender in appenders]
    wait_for(lambda: all(len(a.acknowledged) >= n + 20 for a, n in zip(appenders, counts, strict=True)), timeout_s=120)
    for appender in appenders:
        appender.stopping.set()
        appender.join(timeout=60)
    final = [len(appender.acknowledged) for appender in appenders]
    wait_for(lambda: all(len(r.values) >= n for r, n in zip(readers, final, strict=True)), timeout_s=60)
    for reader in readers:  # (all told first: each one's poll at the tail ends within the long-poll timeout)
        reader.stopping.set()
    for reader in readers:
        reader.join(timeout=60)
        assert not reader.is_alive()

    allowed = {"200", "204", "503 Retry-After", "502 RELAY_IN_DOUBT"}
    for appender, reader in zip(appenders, readers, strict=True):
        check_history(appender.acknowledged, reader.values)
        assert set(reader.statuses) <= allowed, reader.statuses
        assert set(appender.refusals) <= {"503", "502"}, appender.refusals  # (no dropped connection)
