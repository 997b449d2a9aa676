"""``ClosingDeadline``: a deadline of one connection that closes its transport when it passes."""

from __future__ import annotations

import asyncio

_EARLY_S = 0.002
"""A timer may fire this much before its deadline and still count as on time: uvloop's clock
ticks in whole milliseconds, so its timers fire up to ~1 ms early, and scheduling again for
the rest spun the loop (hundreds of calls) until the tick."""


class ClosingDeadline:
    """A deadline of one connection that closes its transport when it passes: the head
    deadline (``arm`` when a head is awaited, ``stop`` once it has been parsed) and, with
    httptools, the keep-alive timeout (``arm`` after a response, ``stop`` when bytes come).

    Both are armed and stopped once or twice per request, so neither makes a timer each
    time (a ``call_later`` and its ``cancel`` per request would): ``arm`` notes the deadline,
    and the one timer scheduled lives on; when it fires before a deadline that moved on, it
    is scheduled again for that deadline, and when the deadline was stopped it does nothing.
    A connection has at most one timer per deadline, firing at most once per ``seconds``."""

    __slots__ = ("_deadline", "_handle", "_loop", "_seconds", "_transport")

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self._loop = loop
        self._seconds = seconds
        self._deadline: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._transport: asyncio.BaseTransport | None = None

    def arm(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._deadline = deadline = self._loop.time() + self._seconds
        if self._handle is None:
            self._handle = self._loop.call_at(deadline, self._late)

    @property
    def armed(self) -> bool:
        return self._deadline is not None

    def stop(self) -> None:
        self._deadline = None

    def cancel(self) -> None:
        """Stop, and let go of the timer (the connection is gone)."""
        self._deadline = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _late(self) -> None:
        self._handle = None
        deadline = self._deadline
        if deadline is None:
            return
        if deadline - self._loop.time() > _EARLY_S:  # (armed again since this timer was scheduled)
            self._handle = self._loop.call_at(deadline, self._late)
            return
        self._deadline = None
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
