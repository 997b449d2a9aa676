"""The one workload every fault scenario runs: writers and readers through every node.

Every message is a JSON object ``{"w": <writer>, "n": <its number>}``, unique in the cluster.

- ``Producer``: an idempotent producer (``Producer-Id``/``-Epoch``/``-Seq``) on one stream,
  sending seq 0, 1, ... and retrying each until it is acknowledged, through its node first
  and the next node after any failure (a client with a list of endpoints). It follows a
  node's redirect itself (``durable-streams-redirects: follow``). What the server
  acknowledged must be there exactly once, in order; the seq in flight when it stops may be
  there too (at most once). Each stream has two: one that asks a node every time, and a
  ``sticky`` one that keeps sending to the shard server that acknowledged its last append
  (a client that kept the redirect's target), asking a node again only after a failure: it
  meets a server that lost its lease, or is cut off, stopped, or handing over.
- ``PlainAppender``: plain appends (no producer headers) through one node, to each stream in
  turn, relayed by the node (no ``follow``: ``cluster.node.proxy``). A message is sent again,
  through the next node, while nothing was sent (its connect failed) or the answer is a 503
  (a node's promise: not stored, safe to resend); then the next message. Its outcomes:
  ``acknowledged`` (2xx: there exactly once), ``in_doubt`` (sent and its answer lost, or a
  502 ``RELAY_IN_DOUBT``: there at most once), ``refused`` (any other answer: at most once).
- Readers, one of each kind per node, each on one stream (so every stream is read through
  every kind, each kind through a different node): ``catch-up`` (``GET ?offset=``), ``long-poll``
  (``live=long-poll``) and ``sse`` (``live=sse``: a read is the ``data`` events before a
  ``control`` event). A reader stays on its node (one cut off just fails), follows redirects,
  and asks again from the offset it holds after any failure. Every answer with messages (or
  that moved its offset) is a ``Read``: stream, start offset, messages, next offset.

Requests follow redirects hop by hop (``post``): a failure to connect (refused, unreachable,
connect timeout) means nothing was sent; any other failure after the first byte went out
leaves the request in doubt. Timeouts are short (connect 1 s, answer 5 s) so a client meets
a partition as a failure and moves on.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import requests
import urllib3

from pyspark_durable_streams.client.errors import ResponseError
from pyspark_durable_streams.client.sse import Data, iter_events

Message = tuple[str, int]
JSON = {"Content-Type": "application/json"}
FOLLOWS = {**JSON, "durable-streams-redirects": "follow"}
"""A client that follows a POST's redirect itself (``cluster.node.proxy``); without it a node relays."""
TIMEOUT = (1.0, 5.0)
PAUSE_S = 0.05
"""Between a writer's appends (each is a commit of its own: fewer commits, quicker takeovers)."""


class NotSent(Exception):
    """No server received the request (the connect failed)."""


class InDoubt(Exception):
    """The request was sent; its answer was lost."""


def session() -> requests.Session:
    http = requests.Session()
    http.trust_env = False
    return http


def _never_connected(exc: requests.RequestException) -> bool:
    if isinstance(exc, requests.ConnectTimeout):
        return True
    reason = exc.args[0] if exc.args else None
    return isinstance(reason, urllib3.exceptions.MaxRetryError) and isinstance(
        reason.reason, urllib3.exceptions.NewConnectionError | urllib3.exceptions.ConnectTimeoutError
    )


def post(http: requests.Session, url: str, body: bytes, headers: dict[str, str]) -> requests.Response:
    """A POST, redirects followed hop by hop; ``NotSent`` or ``InDoubt`` when no answer came."""
    for _ in range(5):
        try:
            answer = http.post(url, data=body, headers=headers, timeout=TIMEOUT, allow_redirects=False)
        except requests.RequestException as exc:
            raise (NotSent if _never_connected(exc) else InDoubt)(f"{url}: {exc}") from exc
        if answer.status_code not in (307, 308):
            return answer
        url = answer.headers["Location"]
    raise InDoubt(f"{url}: more than 5 redirects")


def message(writer: str, n: int) -> bytes:
    return json.dumps({"w": writer, "n": n}).encode()


def parse(body: bytes) -> tuple[Message, ...]:
    return tuple((item["w"], item["n"]) for item in json.loads(body))


class Worker(threading.Thread):
    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.stopping = threading.Event()
        self.failures: dict[str, int] = {}

    def note(self, what: str) -> None:
        self.failures[what] = self.failures.get(what, 0) + 1


class Producer(Worker):
    def __init__(self, writer: str, stream: str, nodes: list[str], *, sticky: bool = False) -> None:
        super().__init__(writer)
        self.writer, self.stream, self.nodes, self.sticky = writer, stream, nodes, sticky
        self.acknowledged: list[int] = []
        self.in_flight: int | None = None
        """The seq sent and not acknowledged when it stopped (it may be stored)."""
        self.direct = 0
        """Appends acknowledged by a shard server asked directly (``sticky``)."""

    def run(self) -> None:
        http, node, n = session(), 0, 0
        target: str | None = None  # (sticky: the shard server that acknowledged the last append)
        while not self.stopping.is_set():
            url = target or f"{self.nodes[node % len(self.nodes)]}/v1/stream/{self.stream}"
            headers = {**FOLLOWS, "Producer-Id": self.writer, "Producer-Epoch": "0", "Producer-Seq": str(n)}
            self.in_flight = n
            try:
                answer = post(http, url, message(self.writer, n), headers)
            except (NotSent, InDoubt) as exc:
                self.note(type(exc).__name__)
                node, target = node + 1, None
                time.sleep(0.05)  # (a backoff before the retry)
                continue
            if answer.status_code in (200, 204):
                self.acknowledged.append(n)
                self.direct += target is not None and answer.url == target
                self.in_flight = None
                n += 1
                target = answer.url if self.sticky else None
                time.sleep(PAUSE_S)  # (the producer's pace: time is the workload)
            else:
                self.note(f"{answer.status_code} {_code(answer)}")
                node, target = node + 1, None
                time.sleep(0.1)  # (a backoff before the retry)


def _code(answer: requests.Response) -> str:
    try:
        return str(answer.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""


class PlainAppender(Worker):
    def __init__(self, writer: str, streams: list[str], nodes: list[str], first: int) -> None:
        super().__init__(writer)
        self.writer, self.streams, self.nodes, self.first = writer, streams, nodes, first
        self.outcomes: dict[int, tuple[str, str]] = {}
        """Message number -> (stream, "acknowledged" | "in_doubt" | "refused")."""

    def run(self) -> None:
        http, node, n = session(), self.first, 0
        while not self.stopping.is_set():
            stream = self.streams[n % len(self.streams)]
            self.outcomes[n] = (stream, self.append(http, node, stream, n))
            node += self.outcomes[n][1] != "acknowledged"
            n += 1
            time.sleep(2 * PAUSE_S)  # (the appender's pace: time is the workload)

    def append(self, http: requests.Session, node: int, stream: str, n: int) -> str:
        """Message ``n``, sent again (through the next node) while nothing was sent or the
        answer is a 503 (the project's promise: not stored, safe to send again)."""
        while True:
            url = f"{self.nodes[node % len(self.nodes)]}/v1/stream/{stream}"
            try:
                answer = post(http, url, message(self.writer, n), JSON)
            except NotSent:
                self.note("NotSent")
            except InDoubt:
                return "in_doubt"
            else:
                if answer.status_code in (200, 204):
                    return "acknowledged"
                self.note(f"{answer.status_code} {_code(answer)}")
                if answer.status_code != 503:  # (502 RELAY_IN_DOUBT: a relay whose answer was lost)
                    return "in_doubt" if answer.status_code == 502 else "refused"
            if self.stopping.is_set():
                return "in_doubt"  # (a 503 before may have lied: at most once, then)
            node += 1
            time.sleep(PAUSE_S)  # (a backoff before sending it again)


@dataclass(frozen=True)
class Read:
    reader: str
    chain: int
    """A reader's reads of one chain follow each other: each starts where the last ended."""
    stream: str
    start: str
    messages: tuple[Message, ...]
    next: str
    at: float


@dataclass(eq=False)
class Reader(Worker):
    kind: str
    node_url: str
    stream: str
    reads: list[Read]
    offset: str = "-1"
    chain: int = 0
    http: requests.Session = field(default_factory=session)

    def __post_init__(self) -> None:
        super().__init__(f"{self.kind}@{self.node_url}/{self.stream}")

    @property
    def url(self) -> str:
        return f"{self.node_url}/v1/stream/{self.stream}"

    def record(self, messages: tuple[Message, ...], next_offset: str) -> None:
        if messages or next_offset != self.offset:
            read = Read(self.name, self.chain, self.stream, self.offset, messages, next_offset, time.monotonic())
            self.reads.append(read)
        self.offset = next_offset

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.read_once()
            except (requests.RequestException, ValueError, ResponseError) as exc:
                self.note(type(exc).__name__)
                time.sleep(0.2)  # (a backoff before reading again)

    def refused(self, answer: requests.Response) -> None:
        self.note(f"{answer.status_code} {_code(answer)}")
        if answer.status_code in (400, 404, 410):  # (its offset is unknown: noted, read again from the start)
            self.chain += 1
            self.offset = "-1"
        time.sleep(0.2)  # (a backoff before reading again)

    def read_once(self) -> None:
        live = {"catch-up": {}, "long-poll": {"live": "long-poll"}, "sse": {"live": "sse"}}[self.kind]
        params = {"offset": self.offset, **live}
        if self.kind == "sse":
            with self.http.get(self.url, params=params, stream=True, timeout=TIMEOUT) as answer:
                if answer.status_code != 200:
                    self.refused(answer)
                    return
                pending: list[Message] = []
                for event in iter_events(answer.iter_content(chunk_size=None), base64_encoded=False):
                    if isinstance(event, Data):
                        pending += parse(event.payload)
                    else:
                        self.record(tuple(pending), event.next_offset)
                        pending = []
                    if self.stopping.is_set():
                        return
            return
        answer = self.http.get(self.url, params=params, timeout=TIMEOUT)
        if answer.status_code not in (200, 204):
            self.refused(answer)
            return
        messages = parse(answer.content) if answer.status_code == 200 else ()
        self.record(messages, answer.headers["Stream-Next-Offset"])
        if self.kind == "catch-up" and answer.headers.get("Stream-Up-To-Date") == "true":
            time.sleep(0.2)  # (a catch-up reader at the tail polls: time is its interval)


KINDS = ("catch-up", "long-poll", "sse")


class Workload:
    """Producers (one per stream, each through a different node first), a plain appender per
    node, and one reader of each kind per node (module docstring)."""

    def __init__(self, nodes: list[str], streams: list[str]) -> None:
        self.nodes, self.streams = nodes, streams
        self.reads: list[Read] = []
        self.producers = [
            Producer(f"{kind}{index}", stream, nodes[index % len(nodes) :] + nodes[: index % len(nodes)], sticky=sticky)
            for index, stream in enumerate(streams)
            for kind, sticky in (("p", False), ("s", True))
        ]
        self.appenders = [PlainAppender(f"a{index}", streams, nodes, index) for index in range(len(nodes))]
        self.readers = [
            Reader(kind, node, streams[(index + offset) % len(streams)], self.reads)
            for index, node in enumerate(nodes)
            for offset, kind in enumerate(KINDS)
        ]

    @property
    def workers(self) -> list[Worker]:
        return [*self.producers, *self.appenders, *self.readers]

    def start(self) -> None:
        for worker in self.workers:
            worker.start()

    def acknowledged(self) -> int:
        return sum(len(producer.acknowledged) for producer in self.producers)

    def stop_writers(self) -> None:
        writers: list[Worker] = [*self.producers, *self.appenders]
        _stop(writers)

    def stop_readers(self) -> None:
        _stop(list(self.readers))

    def failures(self) -> dict[str, int]:
        """Every worker's failures, summed by kind (``NotSent``, ``InDoubt``, ``503 SHARD_UNAVAILABLE``, ...)."""
        total: dict[str, int] = {}
        for worker in self.workers:
            for what, count in worker.failures.items():
                total[what] = total.get(what, 0) + count
        return total


def _stop(workers: list[Worker]) -> None:
    for worker in workers:
        worker.stopping.set()
    deadline = time.monotonic() + 20
    for worker in workers:
        worker.join(max(0.1, deadline - time.monotonic()))
    alive = [worker.name for worker in workers if worker.is_alive()]
    assert not alive, f"still running 20 s after being stopped: {alive}"
