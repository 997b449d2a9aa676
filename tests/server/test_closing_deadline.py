"""``ClosingDeadline`` on the server's loop (uvloop): one timer per connection, moved
deadlines honoured, and a timer that fires a little early (uvloop's clock ticks in whole
milliseconds) closes on time instead of scheduling itself again and again until the tick."""

from __future__ import annotations

import asyncio

import uvloop

from durable_streams_server.http.connections import ClosingDeadline


class _Transport:
    """The two calls the deadline makes of a transport."""

    def __init__(self) -> None:
        self.closed_at: float | None = None

    def is_closing(self) -> bool:
        return self.closed_at is not None

    def close(self) -> None:
        self.closed_at = asyncio.get_running_loop().time()


class _Counted(ClosingDeadline):
    __slots__ = ("firings",)

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        super().__init__(loop, seconds)
        self.firings = 0

    def _late(self) -> None:
        self.firings += 1
        super()._late()


def _run(seconds: float, moves: int) -> tuple[list[int], list[float]]:
    """Twenty deadlines of ``seconds``, each moved on ``moves`` times halfway; their timers'
    firings and how late each connection was closed (seconds after the deadline in force: the
    last one set before the close; on a busy machine a sleep may outlast a deadline, which
    then rightly closes before the next move)."""

    async def main() -> tuple[list[int], list[float]]:
        loop = asyncio.get_running_loop()
        timers, lateness = [], []
        for _ in range(20):
            transport = _Transport()
            timer = _Counted(loop, seconds)
            timer.arm(transport)  # type: ignore[arg-type]
            armed = [loop.time()]
            for _ in range(moves):
                await asyncio.sleep(seconds / 2)
                timer.arm(transport)  # type: ignore[arg-type]
                armed.append(loop.time())
            while transport.closed_at is None:
                await asyncio.sleep(0.001)
            timers.append(timer.firings)
            closed_at = transport.closed_at
            lateness.append(closed_at - (max(at for at in armed if at <= closed_at) + seconds))
        return timers, lateness

    return uvloop.run(main())


def test_an_expired_deadline_closes_at_its_first_firing() -> None:
    firings, lateness = _run(0.01, moves=0)
    assert max(firings) == 1
    assert all(-0.003 < late < 0.02 for late in lateness), lateness


def test_a_moved_deadline_fires_once_more_and_closes_at_the_new_deadline() -> None:
    firings, lateness = _run(0.02, moves=3)
    assert max(firings) <= 4  # (at most once per deadline it was moved past, and at the last: not a spin)
    assert all(-0.003 < late < 0.03 for late in lateness), lateness


def test_a_stopped_deadline_never_closes() -> None:
    async def main() -> tuple[bool, int]:
        transport = _Transport()
        timer = _Counted(asyncio.get_running_loop(), 0.01)
        timer.arm(transport)  # type: ignore[arg-type]
        timer.stop()
        await asyncio.sleep(0.05)
        return transport.is_closing(), timer.firings

    assert uvloop.run(main()) == (False, 1)
