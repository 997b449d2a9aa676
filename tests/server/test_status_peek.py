"""The status page's listing never wakes a stream: sleeping streams are shown from their kept
state, with the same row a built stream gives (a real Storage + Engine on a local Delta table,
the engine's clock moved by the test)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from local_engine import ManualClock, open_local

from durable_streams_server.engine.engine import EngineConfig
from durable_streams_server.engine.types import AppendRequest, CreateRequest
from durable_streams_server.http.ui.streams_view import list_streams
from durable_streams_server.protocol.tokens import TokenGrant

IDLE_MS = 60_000
EVERYONE = TokenGrant("ops", "read")


def test_listing_sleeping_streams_shows_them_without_waking_them(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        storage, engine = await open_local(tmp_path, 0.02, EngineConfig(idle_stream_ms=IDLE_MS), clock)
        engine.idle.step_s = 60.0
        names = [f"v1/stream/idle-{n}" for n in range(3)]
        for n, name in enumerate(names):
            await engine.create(CreateRequest(name, "text/plain", None, None, None, False, b"first"))
            for _ in range(n):
                await engine.append(name, AppendRequest(b"more", None, None, None, False))
        deadline = time.monotonic() + 30
        while not all(engine.streams[name].flushed_tail == engine.streams[name].tail for name in names):
            assert time.monotonic() < deadline, "not flushed"
            await asyncio.sleep(0.02)
        clock.ms += IDLE_MS
        assert engine.idle.step() == len(names) and engine.live.index.dormant == len(names)

        asleep = (await list_streams(engine, EVERYONE, {}))["streams"]
        assert engine.live.index.dormant == len(names)  # none woken
        assert [(row["name"], row["messages"], row["bytes"]) for row in asleep] == [
            (name, n + 1, 5 + 4 * n) for n, name in enumerate(names)
        ]
        for name in names:
            engine.find(name)  # woken by a request
        assert engine.live.index.dormant == 0
        assert (await list_streams(engine, EVERYONE, {}))["streams"] == asleep  # the same rows built
        await storage.close()

    asyncio.run(scenario())
