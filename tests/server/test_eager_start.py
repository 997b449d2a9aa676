"""Fast-path requests start at once and get a task only when they wait (``http/fastpath/eager.py``).

First ``start_eagerly`` itself on a plain loop: a coroutine that never waits ends in the
caller's turn without a task; one that waits is continued by a task from that wait, with what
the future gives it, a cancellation thrown in where it waits, and its context. Then on a real
server (``inprocess.serving``): which requests ran outside any task, seen from the handler; and
the guarantee eager start rests on: no first step of any request that starts eagerly asks for
the current task (as ``asyncio.timeout``, ``TaskGroup`` and ``limits.BodyDeadline`` do).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import socket
import threading
import traceback
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import requests
from inprocess import serving
from rawhttp import exchange, request_bytes, text_post_head
from servers import live_readers, wait_for

from durable_streams_server import ServerConfig
from durable_streams_server.http.fastpath import protocol
from durable_streams_server.http.fastpath.eager import start_eagerly
from durable_streams_server.http.fastpath.route import FastPath
from durable_streams_server.protocol.tokens import parse_tokens

TEXT = {"Content-Type": "text/plain"}
_NOTE: contextvars.ContextVar[str] = contextvars.ContextVar("note", default="unset")


async def _started(coroutine: Any, tasks: set[asyncio.Task[None]]) -> None:
    """``start_eagerly`` from a loop callback, as the protocol's ``data_received`` calls it."""
    loop = asyncio.get_running_loop()
    called: asyncio.Future[None] = loop.create_future()

    def callback() -> None:
        start_eagerly(loop, coroutine, tasks)
        called.set_result(None)

    loop.call_soon(callback)
    await called


async def _waiting(work: Callable[[asyncio.Future[Any]], Coroutine[Any, Any, None]]) -> tuple[Any, Any]:
    """``work(future)`` started eagerly, waiting for ``future`` in the one task made for it."""
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    tasks: set[asyncio.Task[None]] = set()
    await _started(work(future), tasks)
    (task,) = tasks
    return future, task


def test_a_coroutine_that_never_waits_ends_without_a_task() -> None:
    steps: list[object] = []

    async def work() -> None:
        steps.append(asyncio.current_task())

    async def main() -> None:
        tasks: set[asyncio.Task[None]] = set()
        await _started(work(), tasks)
        assert steps == [None]  # ran already, in this turn, outside any task
        assert tasks == set()

    asyncio.run(main())


def test_a_coroutine_that_waits_is_continued_by_a_task() -> None:
    seen: list[Any] = []

    async def work(future: asyncio.Future[int]) -> None:
        _NOTE.set("set in the first step")
        seen.append(asyncio.current_task())
        seen.append(await future)
        seen.append(asyncio.current_task())
        await asyncio.sleep(0)  # (a bare yield: the task steps it again)
        seen.append(_NOTE.get())

    async def main() -> None:
        tasks: set[asyncio.Task[None]] = set()
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        await _started(work(future), tasks)
        assert seen == [None] and len(tasks) == 1
        (task,) = tasks
        future.set_result(7)
        await task
        assert seen == [None, 7, task, "set in the first step"]
        assert tasks == set()  # (let go once done)
        assert _NOTE.get() == "unset"  # (its own copy of the context, as a task's)

    asyncio.run(main())


def test_cancelling_the_task_cancels_the_coroutine_where_it_waits() -> None:
    cleaned: list[str] = []

    async def work(future: asyncio.Future[None]) -> None:
        try:
            await future
        except asyncio.CancelledError:
            cleaned.append("cancelled where it waited")
            raise

    async def main() -> None:
        future, task = await _waiting(work)
        await asyncio.sleep(0)  # (the task took over the wait)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert future.cancelled()

    asyncio.run(main())
    assert cleaned == ["cancelled where it waited"]


def test_an_exception_after_the_wait_ends_the_task_with_it() -> None:
    async def work(future: asyncio.Future[None]) -> None:
        await future
        raise ValueError("after the wait")

    async def main() -> None:
        future, task = await _waiting(work)
        future.set_result(None)
        with pytest.raises(ValueError, match="after the wait"):
            await task

    asyncio.run(main())


# -- on a real server ------------------------------------------------------------------------


class _TaskNoting:
    """Wraps the fast path's ``respond``: notes, per request, the method and whether it
    started in a task and whether it ended in one."""

    def __init__(self, fast_path: FastPath) -> None:
        self.seen: list[tuple[str, bool, bool]] = []
        self.started: list[str] = []
        """The method of each request as it starts (``seen`` has it once it ended)."""
        original = fast_path.respond

        async def respond(name: str, scope: Any, *args: Any) -> Any:
            started_in_task = asyncio.current_task() is not None
            self.started.append(scope["method"])
            try:
                return await original(name, scope, *args)
            finally:
                self.seen.append((scope["method"], started_in_task, asyncio.current_task() is not None))

        fast_path.respond = respond  # type: ignore[method-assign]


@contextlib.contextmanager
def _served(config: ServerConfig) -> Iterator[tuple[str, _TaskNoting, int]]:
    with serving(config) as (url, server):
        assert server.fast_path is not None
        yield url, _TaskNoting(server.fast_path), int(url.rsplit(":", 1)[1])


def test_reads_run_without_a_task_and_appends_continue_in_one_at_their_sync(tmp_path: Path) -> None:
    """A HEAD and a read from memory are answered within the parser's turn. An append (its
    body sent with its head, as one write) starts there too, while no other write waits, and
    is continued by a task from its wait for durability: the WAL is synced on its own thread,
    never the loop's (``storage.sync_policy``), so every append waits for it. One that comes
    while others wait for their group commit starts in a task."""
    with _served(ServerConfig(data_dir=tmp_path)) as (url, noted, port):
        stream = f"{url}/v1/stream/quiet"
        with requests.Session() as http, socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            assert http.put(stream, headers=TEXT).status_code == 201
            noted.seen.clear()
            head = text_post_head(b"/v1/stream/quiet", 1)
            sock.sendall(head + b"a")
            assert sock.recv(65536).startswith(b"HTTP/1.1 204 ")
            assert http.head(stream).status_code == 200
            read = http.get(stream, params={"offset": "-1"})
            assert (read.status_code, read.content) == (200, b"a")
            assert noted.seen == [("POST", False, True), ("HEAD", False, False), ("GET", False, False)]
            noted.seen.clear()
            barrier = threading.Barrier(4)

            def burst() -> None:
                with socket.create_connection(("127.0.0.1", port), timeout=30) as own:
                    barrier.wait()
                    for _ in range(20):
                        own.sendall(head + b"b")
                        assert own.recv(65536).startswith(b"HTTP/1.1 204 ")

            threads = [threading.Thread(target=burst) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert len(noted.seen) == 80
            assert ("POST", True, True) in noted.seen  # (behind others waiting for their batch: a task at once)
            assert http.get(stream, params={"offset": "-1"}).content == b"a" + b"b" * 80


def test_a_long_poll_and_a_late_body_start_in_a_task(tmp_path: Path) -> None:
    """A long-poll (it parks) and a request whose body has not all come with its head (reading
    it has a deadline, which needs a task) start in a task, as uvicorn starts requests. (The
    wake may reach the reader's task before or after the append's ends.)"""
    with _served(ServerConfig(data_dir=tmp_path)) as (url, noted, port):
        stream = f"{url}/v1/stream/waits"
        assert requests.put(stream, headers=TEXT).status_code == 201
        tail = requests.head(stream).headers["Stream-Next-Offset"]
        noted.seen.clear()
        with requests.Session() as poller:
            answer: list[requests.Response] = []
            polling = threading.Thread(
                target=lambda: answer.append(poller.get(stream, params={"offset": tail, "live": "long-poll"}))
            )
            polling.start()
            wait_for(lambda: live_readers(url, "long_poll") == 1, interval_s=0.01)
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(text_post_head(b"/v1/stream/waits", 4) + b"la")
                wait_for(lambda: "POST" in noted.started, message=lambda: "(the append never started)")
                sock.sendall(b"te")
                assert sock.recv(65536).startswith(b"HTTP/1.1 204 ")
            polling.join(timeout=30)
        assert answer and (answer[0].status_code, answer[0].content) == (200, b"late")
        assert sorted(noted.seen) == [("GET", True, True), ("POST", True, True)]  # (in either order)


# -- the guarantee: a first step never needs a task -------------------------------------------


class _FirstSteps:
    """Watches the eager first steps of a server in this process: ``start_eagerly`` as the
    protocol calls it, and ``asyncio.current_task`` -- what ``asyncio.timeout``, ``TaskGroup`` and
    ``limits.BodyDeadline`` ask first, and get ``None`` from in a first step -- noting each call
    made during a first step with its callers."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.steps = 0
        self.ended = 0
        """First steps that answered their request (no task made for the rest)."""
        self.calls: list[str] = []
        self._stepping = False
        real_start, real_current = protocol.start_eagerly, asyncio.current_task

        def start(loop: asyncio.AbstractEventLoop, coroutine: Any, tasks: set[asyncio.Task[None]]) -> None:
            before = len(tasks)
            self._stepping = True
            try:
                real_start(loop, coroutine, tasks)
            finally:
                self._stepping = False
            self.steps += 1
            self.ended += len(tasks) == before

        def current_task(loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Task[Any] | None:
            if self._stepping:
                self.calls.append("".join(traceback.format_stack(limit=8)[:-1]))
            return real_current(loop)

        monkeypatch.setattr(protocol, "start_eagerly", start)
        monkeypatch.setattr(asyncio, "current_task", current_task)
        monkeypatch.setattr(asyncio.tasks, "current_task", current_task)


def _every_kind(http: requests.Session, url: str, auth: dict[str, str]) -> list[tuple[str, str, int]]:
    """One of each kind of request that starts eagerly (a read or HEAD that is not a long-poll; a
    create or append while no other write waits, its body sent with its head), answered and refused."""
    base = f"{url}/v1/stream"
    port = int(url.rsplit(":", 1)[1])
    text, as_json = {**TEXT, **auth}, {"Content-Type": "application/json", **auth}
    producer = {**text, "Producer-Id": "p", "Producer-Epoch": "0"}
    calls: list[tuple[str, str, dict[str, str], bytes | None, dict[str, str] | None]] = [
        ("PUT", "s", text, b"first", None),  # 201
        ("PUT", "s", text, b"", None),  # 200: the same again
        ("PUT", "s", as_json, b"", None),  # 409
        ("PUT", "ttl", {**text, "Stream-TTL": "soon"}, b"", None),  # 400
        ("PUT", "j", as_json, b"[1]", None),  # 201, JSON
        ("PUT", "fork", {**text, "Stream-Forked-From": "/v1/stream/s"}, b"", None),  # 201, a fork
        ("POST", "s", text, b"two", None),  # 204
        ("POST", "s", {**producer, "Producer-Seq": "0"}, b"three", None),  # 200
        ("POST", "s", {**producer, "Producer-Seq": "0"}, b"three", None),  # 204: a duplicate
        ("POST", "s", {**producer, "Producer-Seq": "7"}, b"gap", None),  # 409
        ("POST", "s", auth, b"untyped", None),  # 400
        ("POST", "missing", text, b"x", None),  # 404
        ("POST", "s", text, b"x" * 3000, None),  # 413
        ("POST", "j", as_json, b"{]", None),  # 400: not JSON
        ("GET", "s", auth, None, {"offset": "-1"}),  # from memory
        ("GET", "s", auth, None, {"offset": "now"}),
        ("GET", "j", auth, None, {"offset": "-1"}),
        ("GET", "s", auth, None, {"offset": "bogus"}),  # 400
        ("GET", "missing", auth, None, {"offset": "-1"}),  # 404
        ("HEAD", "s", auth, None, None),
        ("HEAD", "missing", auth, None, None),  # 404
        ("POST", "closing", text, b"", None),  # 400: empty, not closing
        ("PUT", "closing", text, b"", None),
        ("POST", "closing", {**text, "Stream-Closed": "true"}, b"", None),  # closes
        ("POST", "closing", text, b"late", None),  # 409: closed
    ]
    answered = []
    for method, name, headers, body, params in calls:
        target = f"/v1/stream/{name}" + ("?" + urlencode(params) if params else "")
        pairs = [(key.encode(), value.encode()) for key, value in headers.items()]
        response = exchange(port, request_bytes(method, target.encode(), pairs, body), method)  # (one write)
        answered.append((method, name, response.status))
    tag = http.get(f"{base}/s", params={"offset": "-1"}, headers=auth).headers["ETag"]
    assert http.get(f"{base}/s", params={"offset": "-1"}, headers={**auth, "If-None-Match": tag}).status_code == 304
    none_yet = "durable_streams_delta_commit_duration_seconds_count 0"
    wait_for(
        lambda: none_yet not in http.get(f"{url}/metrics", headers=auth).text,
        timeout_s=30,
        message=lambda: "(no flush into Delta)",
    )
    assert http.get(f"{base}/fork", params={"offset": "-1"}, headers=auth).content == b"first"  # (from Delta)
    return answered


def test_no_first_step_of_any_eagerly_started_request_asks_for_its_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule eager start rests on (``eager.py``): before its first wait, a request started in
    the parser's turn runs outside any task, so nothing on that stretch may need one. Every kind of
    request that starts eagerly, on a server with tokens and one with a rate limit (the request
    policy's refusals), reads from memory and from Delta: no call for the current task."""
    steps = _FirstSteps(monkeypatch)
    tokens = parse_tokens('[{"name": "w", "token": "writer-token-0123456789", "scope": "write"}]', "test")
    writer = {"Authorization": "Bearer writer-token-0123456789"}
    guarded = ServerConfig(
        data_dir=tmp_path / "auth", auth=tokens, max_body_bytes=2048, tail_cache_bytes=0, flush_interval_ms=50
    )
    with serving(guarded) as (url, _), requests.Session() as http:
        http.trust_env = False
        answered = _every_kind(http, url, writer)
        port = int(url.rsplit(":", 1)[1])
        anonymous = exchange(port, text_post_head(b"/v1/stream/s", 9) + b"anonymous", "POST")
        wrong = http.head(f"{url}/v1/stream/s", headers={"Authorization": "Bearer wrong-token-0123456789"})
        assert (anonymous.status, wrong.status_code) == (401, 401)
    limited = ServerConfig(data_dir=tmp_path / "limited", rate_limit_rps=0.01, rate_limit_burst=1)
    with serving(limited) as (url, _), requests.Session() as http:
        http.trust_env = False
        statuses = [http.put(f"{url}/v1/stream/r", headers=TEXT).status_code for _ in range(2)]
        statuses.append(http.head(f"{url}/v1/stream/r").status_code)
        assert statuses == [201, 429, 429]
    assert steps.steps >= 33 and steps.ended >= 15, (steps.steps, steps.ended)  # (the first steps happened)
    assert not steps.calls, "a first step asked for its task:\n" + "\n".join(steps.calls)
    assert [status for _, _, status in answered] == [
        *(201, 200, 409, 400, 201, 201),  # creates
        *(204, 200, 204, 409, 400, 404, 413, 400),  # appends
        *(200, 200, 200, 400, 404, 200, 404),  # reads and HEADs
        *(400, 201, 204, 409),  # a close
    ]
