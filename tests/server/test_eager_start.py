"""Lean requests start at once and get a task only when they wait (``http/eager.py``).

First ``start_eagerly`` itself on a plain loop: a coroutine that never waits ends in the
caller's turn without a task; one that waits is continued by a task from that wait, with what
the future gives it, a cancellation thrown in where it waits, and its context. Then on a real
server (``inprocess.serving``): which lean requests ran outside any task, seen from the handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from inprocess import serving
from rawhttp import text_post_head

from durable_streams_server import ServerConfig
from durable_streams_server.http.fastpath.eager import start_eagerly
from durable_streams_server.http.fastpath.route import FastPath

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
    """Wraps the lean path's ``respond``: notes, per request, the method and whether it
    started in a task and whether it ended in one."""

    def __init__(self, fast_path: FastPath) -> None:
        self.seen: list[tuple[str, bool, bool]] = []
        original = fast_path.respond

        async def respond(name: str, scope: Any, *args: Any) -> Any:
            started_in_task = asyncio.current_task() is not None
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


def _poller_parked(url: str) -> bool:
    """One long-poll waits (the server's gauge of live readers)."""
    metrics = requests.get(f"{url}/metrics").text
    return 'durable_streams_live_readers{mode="long_poll"} 1.0' in metrics


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
            deadline = time.monotonic() + 10
            while not _poller_parked(url) and time.monotonic() < deadline:
                time.sleep(0.01)
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(text_post_head(b"/v1/stream/waits", 4) + b"la")
                time.sleep(0.2)
                sock.sendall(b"te")
                assert sock.recv(65536).startswith(b"HTTP/1.1 204 ")
            polling.join(timeout=30)
        assert answer and (answer[0].status_code, answer[0].content) == (200, b"late")
        assert sorted(noted.seen) == [("GET", True, True), ("POST", True, True)]  # (in either order)
