"""What the server benchmarks share: a server under test, one HTTP exchange, and load spread over
processes and threads.

Load that needs more than one core runs in ``PROCESSES`` processes (``spawn``: each returns one
value, and a failing one fails the scenario, never a silent zero); within a process, connections
run in threads (``threads``: the first failure is raised).
"""

from __future__ import annotations

import http.client
import multiprocessing
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchkit import LOOPBACK

PROCESSES = 4  # load-generator processes for the concurrent scenarios


@dataclass
class Server:
    name: str
    port: int
    pid: int

    def connection(self, timeout: float = 60) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(LOOPBACK, self.port, timeout=timeout)


def request(
    conn: http.client.HTTPConnection,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One exchange: status, headers (lower-case names), body."""
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def create(server: Server, path: str, content_type: str = "application/octet-stream") -> None:
    status, _, _ = request(server.connection(), "PUT", path, headers={"Content-Type": content_type})
    assert status in (200, 201), status


def tail(conn: http.client.HTTPConnection, path: str) -> str:
    _, headers, _ = request(conn, "HEAD", path)
    return headers["stream-next-offset"]


def in_process(target: Callable[..., Any], args: tuple[Any, ...], results: multiprocessing.Queue[Any]) -> None:
    try:
        results.put((True, target(*args)))
    except BaseException as exc:
        results.put((False, f"{type(exc).__name__}: {exc}"))


def gather(results: multiprocessing.Queue[Any], count: int, timeout_s: float) -> list[Any]:
    """One value per worker process; a worker's failure fails the scenario (no silent zeros)."""
    collected = []
    for _ in range(count):
        ok, value = results.get(timeout=timeout_s)
        if not ok:
            raise RuntimeError(f"a load-generator process failed: {value}")
        collected.append(value)
    return collected


def spawn(target: Callable[..., Any], args_per_process: list[tuple[Any, ...]]) -> list[Any]:
    """``target(*args)`` in one process per argument tuple; their return values."""
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue[Any] = context.Queue()
    workers = [context.Process(target=in_process, args=(target, args, results)) for args in args_per_process]
    for worker in workers:
        worker.start()
    collected = gather(results, len(workers), 600)
    for worker in workers:
        worker.join()
    return collected


def threads(work: Callable[[Any], None], items: list[Any]) -> None:
    """``work(item)`` for each item in its own thread; the first failure is raised here."""
    errors: list[BaseException] = []

    def guarded(item: Any) -> None:
        try:
            work(item)
        except BaseException as exc:
            errors.append(exc)

    running = [threading.Thread(target=guarded, args=(item,)) for item in items]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    if errors:
        raise errors[0]
