"""Starting a request's coroutine at once, and in a task only if it has to wait.

uvicorn starts every request as a task (``loop.create_task``), whose first step runs a turn of
the loop later. On Python 3.11 making that task is the costliest part of starting a fast-path
request (``Task.__init__`` registers itself in a Python ``WeakSet``; bench/README.md has the
figures), and most such requests never wait for anything -- a HEAD, a read from memory, an
append after a quiet spell (its sync runs on the loop: ``storage.wal_writer``). ``start_eagerly``
runs the coroutine now, in the caller's turn, up to its first wait; only a coroutine that does
wait (for a group commit, a long-poll's wake, a thread) is handed to a task, which continues it
from that wait (Python 3.12's eager task factory does the same thing for every task).

What differs for the coroutine's first step: ``asyncio.current_task()`` is ``None`` there, so
nothing that needs a task (``asyncio.timeout``, ``limits.BodyDeadline``) may run before the first
wait -- the fast path starts a request this way only when its body is all there
(``protocol.FastPathProtocol``). The first step runs in a copy of the caller's
context, and the task continuing it in that same copy, as one task's steps would.
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
