"""Starting a request's coroutine at once, and in a task only if it has to wait.

uvicorn starts every request as a task (``loop.create_task``), whose first step runs a turn of
the loop later. On Python 3.11 making that task is the costliest part of starting a fast-path
request (``Task.__init__`` registers itself in a Python ``WeakSet``; bench/README.md has the
figures), and many such requests never wait for anything -- a HEAD, a read from memory, a
refusal. ``start_eagerly`` runs the coroutine now, in the caller's turn, up to its first wait;
only a coroutine that does wait (for a group commit, a long-poll's wake, a thread) is handed to a
task, which continues it from that wait (Python 3.12's eager task factory does the same thing for
every task). The first step runs in a copy of the caller's context, and the task continuing it in
that same copy, as one task's steps would.

**The rule: a first step never needs its task.** ``asyncio.current_task()`` is ``None`` there, so
nothing that needs a task may run before the first wait: ``asyncio.timeout`` and ``TaskGroup``
raise, ``limits.BodyDeadline`` raises (it would cancel the reading task). The fast path starts a
request this way only when that stretch cannot reach such code (``FastPath.starts_eagerly``: a
body all there, so no deadline to keep; no long-poll), and the rule is enforced by a test, not
left to convention: tests/server/test_eager_start.py runs every kind of request that starts
eagerly -- creates, appends, reads from memory and from Delta, HEADs, the request policy's
refusals -- on real servers with ``asyncio.current_task`` watched, and fails naming the caller of
any call made during a first step. A handler that comes to need a task before its first wait
fails that test; the request kind then starts in a task (``starts_eagerly``), as uvicorn starts
requests, or the handler waits first.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine, Generator
from typing import Any


def start_eagerly(
    loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, None], tasks: set[asyncio.Task[None]]
) -> None:
    """Run ``coroutine`` up to its first wait now; a task continues it from there, kept in
    ``tasks`` until it ends (uvicorn's set of a connection's request tasks)."""
    context = contextvars.copy_context()
    try:
        waiting = context.run(coroutine.send, None)
    except StopIteration:
        return  # (done: it never waited)
    task = loop.create_task(_continue(coroutine, waiting), context=context)
    task.add_done_callback(tasks.discard)
    tasks.add(task)


async def _continue(coroutine: Coroutine[Any, Any, None], waiting: object) -> None:
    await _Resumed(coroutine, waiting)


class _Resumed:
    """Awaiting this drives a coroutine that already yielded ``waiting`` (the future it awaits)
    on to its end: the task takes each future the coroutine yields, and sends back (or throws
    in, e.g. a cancellation) what the task's step gets, as when it awaits the coroutine itself."""

    __slots__ = ("_coroutine", "_waiting")

    def __init__(self, coroutine: Coroutine[Any, Any, None], waiting: object) -> None:
        self._coroutine = coroutine
        self._waiting = waiting

    def __await__(self) -> Generator[Any, Any, None]:
        coroutine, waiting = self._coroutine, self._waiting
        while True:
            try:
                sent = yield waiting
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as error:  # (thrown in by the task: a cancellation)
                try:
                    waiting = coroutine.throw(error)
                except StopIteration:
                    return
            else:
                try:
                    waiting = coroutine.send(sent)
                except StopIteration:
                    return
