"""Cluster nodes as real processes on loopback, and the checker of what was acknowledged.

A node is ``durable-streams-server --cluster`` (``ServerProcess`` runs it like any server);
it starts one child process per shard it holds. ``kill`` is ``kill -9`` of the node: its
shard servers die with it (the kernel kills them). ``pause``/``resume`` stop and continue
the node and every shard server it runs (SIGSTOP/SIGCONT), like a VM that froze.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import urllib3
from servers import ServerProcess, children, listening_ports

from durable_streams_server.cluster.paths import shard_key, shard_of_key

JSON = {"Content-Type": "application/json"}


def shard_servers(pid: int) -> list[int]:
    """The shard servers node ``pid`` runs: its children that listen on a port (not its spare,
    which waits for settings with no socket: ``cluster.node.workers.SpareServer``)."""
    return [child for child in children(pid) if listening_ports(child)]


@dataclass
class Node:
    process: ServerProcess
    node_id: str
    paused: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.process.url

    def describe(self) -> dict[str, object]:
        answer = requests.get(f"{self.url}/v1/cluster", timeout=10)
        assert answer.status_code == 200, answer.text
        result: dict[str, object] = answer.json()
        return result

    def shards_held(self) -> list[int]:
        return [int(shard) for shard in self.describe()["held"]]  # type: ignore[attr-defined]

    def kill(self) -> list[int]:
        """``kill -9`` of the node; its shard servers' pids (they die with it)."""
        assert self.process.proc is not None
        servers = children(self.process.proc.pid)
        self.process.kill()
        return servers

    def pause(self) -> None:
        assert self.process.proc is not None
        self.paused = [self.process.proc.pid, *children(self.process.proc.pid)]
        for pid in self.paused:
            os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in self.paused:
            with contextlib.suppress(ProcessLookupError):  # (killed meanwhile: a teardown resumes what is left)
                os.kill(pid, signal.SIGCONT)
        self.paused = []


def start_node(factory: Callable[..., ServerProcess], storage: list[str], node_id: str, tmp: Path, *extra: str) -> Node:
    process = factory("--cluster", "--node-id", node_id, *storage, *extra, data_dir=tmp / node_id)
    return Node(process, node_id)


def serving(nodes: list[Node], shards: int) -> Callable[[], bool]:
    """The cluster's steady state: every shard is served, as each node sees it, held by exactly
    one node, and every node holds at least its floor share (so no rebalancing move is still to
    come: a test that starts then meets no 503 from a shard moving)."""

    def check() -> bool:
        held: list[int] = []
        for node in nodes:
            view = node.describe()
            if any(shard["state"] != "serving" for shard in view["shards"]):  # type: ignore[attr-defined]
                return False
            if len(view["held"]) < shards // len(nodes):  # type: ignore[arg-type]
                return False
            held += view["held"]  # type: ignore[operator]
        return sorted(held) == list(range(shards))

    return check


def name_in_shard(shard: int, shards: int, prefix: str) -> str:
    """A stream name (one path segment: its own shard key) whose shard is ``shard``."""
    for index in range(10_000):
        name = f"{prefix}-{index}"
        key = shard_key(f"/v1/stream/{name}")
        assert key is not None
        if shard_of_key(key, shards) == shard:
            return name
    raise AssertionError("no name found")


IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


def send(
    method: str, url: str, *, http: requests.Session | None = None, moving_s: float = 60, **kwargs: Any
) -> requests.Response:
    """One request through a cluster node, asked again as the project's client asks it
    (``client._http``: ``_send_following``) while the shard is moving: a 503, and a 307 whose
    target does not answer (the shard moved after the router last read its lease), which says
    "moving" too. Redirects are followed here, hop by hop, so a node that does not answer
    (hop 0) fails at once, and so does an append whose connection dropped after it was sent
    (it may have landed: asking again could store it twice). Retried for ``moving_s``."""
    session = http or requests.Session()
    session.trust_env = False
    kwargs.setdefault("timeout", 30)
    deadline = time.monotonic() + moving_s
    while True:
        answer = _follow(session, method, url, kwargs)
        if answer is not None and (answer.status_code != 503 or time.monotonic() >= deadline):
            return answer
        assert time.monotonic() < deadline, f"{method} {url}: its shard's server did not answer in {moving_s} s"
        time.sleep(0.2)  # (a backoff before asking again, as the client's)


def _follow(session: requests.Session, method: str, url: str, kwargs: dict[str, Any]) -> requests.Response | None:
    """The answer after following redirects; ``None`` when a redirect's target did not answer."""
    answer = session.request(method, url, allow_redirects=False, **kwargs)
    for _ in range(5):
        if answer.status_code not in (307, 308):
            return answer
        target = answer.headers["Location"]
        try:
            answer = session.request(method, target, allow_redirects=False, **{**kwargs, "params": None})
        except requests.ConnectionError as exc:
            refused = isinstance(exc.args[0] if exc.args else None, urllib3.exceptions.MaxRetryError) and isinstance(
                exc.args[0].reason, urllib3.exceptions.NewConnectionError
            )
            if method in IDEMPOTENT or refused:
                return None
            raise
    raise AssertionError(f"{method} {url}: more than 5 redirects")


def history(url: str, moving_s: float = 60) -> list[int]:
    """Every message of the JSON stream at ``url`` (through a node: ``send``), read to its end."""
    values: list[int] = []
    offset = "-1"
    while True:
        answer = send("GET", url, params={"offset": offset}, moving_s=moving_s)
        assert answer.status_code == 200, answer.text
        values += [item["n"] for item in answer.json()]
        offset = answer.headers["Stream-Next-Offset"]
        if answer.headers.get("Stream-Up-To-Date") == "true":
            return values


class ProducerAppender(threading.Thread):
    """Appends ``{"n": i}`` for i = 0, 1, ... through one URL as an idempotent producer,
    retrying each message (same producer id, epoch and sequence) until it is acknowledged:
    what a client does across a failover. ``acknowledged`` lists what the server confirmed."""

    def __init__(self, url: str, producer: str, stop_after: int) -> None:
        super().__init__(daemon=True)
        self.url, self.producer, self.stop_after = url, producer, stop_after
        self.acknowledged: list[int] = []
        self.refusals: dict[str, int] = {}
        self.stopping = threading.Event()

    def _note(self, what: str) -> None:
        self.refusals[what] = self.refusals.get(what, 0) + 1

    def run(self) -> None:
        http = requests.Session()
        http.trust_env = False
        for n in range(self.stop_after):
            headers = {**JSON, "Producer-Id": self.producer, "Producer-Epoch": "0", "Producer-Seq": str(n)}
            while not self.stopping.is_set():
                try:
                    answer = http.post(self.url, data=b'{"n": %d}' % n, headers=headers, timeout=30)
                except requests.RequestException as exc:
                    self._note(type(exc).__name__)
                    time.sleep(0.05)  # (a backoff before the retry)
                    continue
                if answer.status_code in (200, 204):
                    self.acknowledged.append(n)
                    break
                self._note(str(answer.status_code))
                time.sleep(0.05)  # (a backoff before the retry)
            if self.stopping.is_set():
                return


def check_history(acknowledged: list[int], read: list[int]) -> None:
    """0 lost, 0 duplicated, 0 reordered: what was read is 0..k in order, and holds every
    acknowledged message (a message sent but not acknowledged may be there too: the last)."""
    assert read == sorted(set(read)), f"duplicated or reordered: {read[:50]}..."
    assert read == list(range(len(read))), f"a gap: {read[:50]}..."
    lost = sorted(set(acknowledged) - set(read))
    assert not lost, f"{len(lost)} acknowledged messages lost: {lost[:20]}"
