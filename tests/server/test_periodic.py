"""The engine's periodic background steps (``engine.periodic``): a failing step is logged and
the next ones still run; ``close`` ends the task."""

from __future__ import annotations

import asyncio
import logging

import pytest

from durable_streams_server.engine.periodic import Periodic


def test_a_failing_step_is_logged_and_the_next_ones_run(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    async def step() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("first step fails")

    async def scenario() -> None:
        periodic = Periodic("probe", 0.005, step, logging.getLogger("tests.periodic"))
        periodic.start()
        while len(calls) < 3:
            await asyncio.sleep(0.005)
        await periodic.close()
        after = len(calls)
        await asyncio.sleep(0.05)
        assert len(calls) == after  # closed: no more steps

    with caplog.at_level(logging.ERROR, logger="tests.periodic"):
        asyncio.run(asyncio.wait_for(scenario(), 30))
    failures = [record for record in caplog.records if record.getMessage() == "probe: a step failed"]
    assert len(failures) == 1 and failures[0].exc_info is not None
    assert "first step fails" in str(failures[0].exc_info[1])
