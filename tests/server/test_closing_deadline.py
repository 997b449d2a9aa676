"""``ClosingDeadline`` on the server's loop (uvloop): one timer per connection, moved
deadlines honoured, and a timer that fires a little early (uvloop's clock ticks in whole
milliseconds) closes on time instead of scheduling itself again and again until the tick."""

from __future__ import annotations

import asyncio
import time

import uvloop

from durable_streams_server.http.fastpath.deadline import ClosingDeadline

TICK_S = 0.003
"""How early a timer may fire and still close: uvloop's clock ticks in whole milliseconds, and
``ClosingDeadline`` takes a firing up to 2 ms before its deadline as on time. Also how far a
timer's due time may stray from its deadline beyond the time its scheduling took (uvloop's
``call_at`` is a ``call_later`` of the deadline less the clock as read at the call, counted from
the clock as read when the timer starts, rounded to the millisecond: a process descheduled in
between, as on a loaded CI, is due that much later)."""


class _Transport:
    """The two calls the deadline makes of a transport."""

    def __init__(self) -> None:
        self.closed_at: float | None = None

    def is_closing(self) -> bool:
        return self.closed_at is not None

    def close(self) -> None:
        self.closed_at = asyncio.get_running_loop().time()


class _Counted(ClosingDeadline):
    """The deadline, its timers noted: each timer's due time beside the deadline it was scheduled
    for and the time its scheduling took (the call that scheduled it, timed on uvloop's clock,
    ``time.monotonic``), and each firing's time beside the deadline in force when it fired and
    whether it closed the transport."""

    __slots__ = ("fired", "firings", "scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        super().__init__(loop, seconds)
        self.firings = 0
        self.fired: list[tuple[float, float | None, bool]] = []
        self.scheduled: list[tuple[float, float | None, float]] = []

    def _note_new_timer(self, before: asyncio.TimerHandle | None, started: float) -> None:
        if self._handle is not None and self._handle is not before:
            self.scheduled.append((self._handle.when(), self._deadline, time.monotonic() - started))

    def arm(self, transport: asyncio.BaseTransport) -> None:
        before, started = self._handle, time.monotonic()
        super().arm(transport)
        self._note_new_timer(before, started)

    def _late(self) -> None:
        self.firings += 1
        fired_at, deadline, started = self._loop.time(), self._deadline, time.monotonic()
        open_before = self._transport is not None and not self._transport.is_closing()
        super()._late()
        closed = open_before and self._transport is not None and self._transport.is_closing()
        self.fired.append((fired_at, deadline, closed))
        self._note_new_timer(None, started)


def _run(seconds: float, moves: int) -> list[tuple[_Counted, _Transport]]:
    """Twenty deadlines of ``seconds``, each moved on ``moves`` times halfway; each one's timer
    and transport once the transport is closed. (On a busy machine a sleep may outlast a
    deadline, which then rightly closes before the next move: the checks hold either way.)"""

    async def main() -> list[tuple[_Counted, _Transport]]:
        loop = asyncio.get_running_loop()
        closed = []
        for _ in range(20):
            transport = _Transport()
            timer = _Counted(loop, seconds)
            timer.arm(transport)  # type: ignore[arg-type]
            for _ in range(moves):
                await asyncio.sleep(seconds / 2)
                if transport.closed_at is None:
                    timer.arm(transport)  # type: ignore[arg-type]
            give_up = loop.time() + 30
            while transport.closed_at is None:
                assert loop.time() < give_up, "the deadline never closed its transport"
                await asyncio.sleep(0.001)
            closed.append((timer, transport))
        return closed

    return uvloop.run(main())


def _check(closed: list[tuple[_Counted, _Transport]], moves: int) -> None:
    """What holds however late the loop runs the timers: every timer is due at the deadline in
    force when it was scheduled (to uvloop's millisecond, and no later than the time its
    scheduling took: not a period later); each firing before
    its deadline (the deadline moved on) schedules the timer again and never closes; the
    transport is closed by the firing that found its deadline come, at most ``TICK_S`` before
    it; and a deadline fires at most once per move and once at the end (no spin)."""
    for timer, transport in closed:
        assert timer.scheduled and all(
            deadline is not None and -TICK_S < when - deadline < took + TICK_S
            for when, deadline, took in timer.scheduled
        ), timer.scheduled
        *before, (fired_at, deadline, closed) = timer.fired
        assert closed and transport.closed_at is not None, timer.fired
        assert deadline is not None and fired_at >= deadline - TICK_S, timer.fired
        assert all(not shut and due is not None and at < due for at, due, shut in before), timer.fired
        assert timer.firings == len(timer.fired) <= moves + 1, timer.fired


def test_an_expired_deadline_closes_at_its_first_firing() -> None:
    closed = _run(0.01, moves=0)
    _check(closed, moves=0)
    assert all(timer.firings == 1 for timer, _ in closed)


def test_a_moved_deadline_fires_once_more_and_closes_at_the_new_deadline() -> None:
    closed = _run(0.02, moves=3)
    _check(closed, moves=3)


def test_a_stopped_deadline_never_closes() -> None:
    async def main() -> tuple[bool, int]:
        transport = _Transport()
        timer = _Counted(asyncio.get_running_loop(), 0.01)
        timer.arm(transport)  # type: ignore[arg-type]
        timer.stop()
        await asyncio.sleep(0.05)
        return transport.is_closing(), timer.firings

    assert uvloop.run(main()) == (False, 1)
