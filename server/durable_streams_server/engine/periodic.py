"""A step of the engine's background work run every few moments on the event loop, until closed.

The memory guard (``memory_guard``) and the streams going back to sleep (``idle``) each run
one: a task that sleeps ``interval_s``, runs the step, and goes on whatever the step raised
(logged: background work must never take the server down).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable


class Periodic:
    def __init__(
        self, name: str, interval_s: float, step: Callable[[], Awaitable[object]], log: logging.Logger
    ) -> None:
        self.name = name
        self.interval_s = interval_s
        self._step = step
        self._log = log
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self._step()
            except Exception:
                self._log.exception("%s: a step failed", self.name)
