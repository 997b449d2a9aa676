"""A scripted ``Transport`` and a fake clock: drive the client's retry paths without a server.

``FakeTransport(handler)`` answers each request with what ``handler(request)`` returns: a
``Reply`` (status, headers, body), or an exception instance, which is raised as the
transport would raise it (``reset()`` is a connection reset after the request was sent, so
the server may or may not have stored it). ``FakeTransport.script(*outcomes)`` answers
requests in turn. ``requests`` lists the requests as they arrived; ``exchanges`` pairs each
with its outcome in the order the outcomes were handed out (a handler may block to force an
interleaving, so this order is deterministic where the arrival order is not).

``FakeClock`` supplies ``Backoff(clock=..., sleep=...)``: sleeping records the delay and
advances the clock at once.
"""

from __future__ import annotations

import http
import io
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import requests
import urllib3
from requests.structures import CaseInsensitiveDict

from pyspark_durable_streams.client._http import Request


@dataclass(frozen=True)
class Reply:
    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


Outcome = Reply | BaseException


def reset() -> requests.ConnectionError:
    """What requests raises when the peer resets the connection mid-request."""
    return requests.ConnectionError(ConnectionResetError(104, "Connection reset by peer"))


def response(request: Request, reply: Reply) -> requests.Response:
    """A real ``requests.Response`` (over a urllib3 response, so streamed bodies work too)."""
    built = requests.Response()
    built.status_code = reply.status
    built.reason = http.HTTPStatus(reply.status).phrase
    built.headers = CaseInsensitiveDict(reply.headers)
    built.url = request.url
    built.raw = urllib3.HTTPResponse(
        body=io.BytesIO(reply.body), headers=dict(reply.headers), status=reply.status, preload_content=False
    )
    return built


class FakeTransport:
    def __init__(self, handler: Callable[[Request], Outcome]) -> None:
        self._handler = handler
        self._lock = threading.Lock()
        self.requests: list[Request] = []
        self.exchanges: list[tuple[Request, Outcome]] = []
        self.closed = False

    @classmethod
    def script(cls, *outcomes: Outcome) -> FakeTransport:
        pending = list(outcomes)
        lock = threading.Lock()

        def next_outcome(request: Request) -> Outcome:
            with lock:
                assert pending, f"unscripted request: {request.method} {request.url} {dict(request.headers)}"
                return pending.pop(0)

        return cls(next_outcome)

    def send(self, request: Request) -> requests.Response:
        with self._lock:
            self.requests.append(request)
        outcome = self._handler(request)
        with self._lock:
            self.exchanges.append((request, outcome))
        if isinstance(outcome, BaseException):
            raise outcome
        return response(request, outcome)

    def close(self) -> None:
        self.closed = True


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def seq_of(request: Request) -> int:
    return int(request.headers["Producer-Seq"])
