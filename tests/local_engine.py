"""A real ``Storage`` + ``Engine`` in this process on a local Delta table, recovered and started,
for the tests of the engine's state that need no HTTP (``servers.ServerProcess`` runs the CLI)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from durable_streams_server.engine.engine import Engine, EngineConfig
from durable_streams_server.storage.committer import Storage, StorageConfig
from durable_streams_server.storage.compaction import CompactionConfig


class ManualClock:
    """The engine's clock in milliseconds, from now, moved by the test (``clock.ms += ...``)."""

    def __init__(self) -> None:
        self.ms = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.ms


class QuietObserver:
    def delta_commit(self, seconds: float, ok: bool) -> None: ...

    def compaction(self, seconds: float, ok: bool) -> None: ...


async def open_local(
    data_dir: Path,
    flush_interval_s: float = 0.05,
    engine_config: EngineConfig | None = None,
    clock: Callable[[], int] | None = None,
) -> tuple[Storage, Engine]:
    """Storage and engine over ``data_dir`` (no compaction), state recovered, storage started."""
    config = StorageConfig(
        data_dir=data_dir,
        storage_uri=str(data_dir / "delta"),
        storage_options={},
        flush_interval_s=flush_interval_s,
        compaction=CompactionConfig(interval_s=0),
    )
    storage = Storage(config, QuietObserver())
    engine = Engine(storage, engine_config) if clock is None else Engine(storage, engine_config, clock=clock)
    engine.load(storage.recover())
    await storage.start()
    return storage, engine


async def put_to_sleep(engine: Engine, clock: ManualClock, idle_ms: int, names: list[str]) -> list[int]:
    """Wait until ``names`` are flushed, then move the clock past ``idle_ms`` and put them to sleep
    (``IdleStreams.step``); their uids."""
    deadline = time.monotonic() + 30
    while not all(engine.streams[name].flushed_tail == engine.streams[name].tail for name in names):
        assert time.monotonic() < deadline, "not flushed"
        await asyncio.sleep(0.02)
    uids = [engine.streams[name].uid for name in names]
    clock.ms += idle_ms
    engine.idle.step()
    assert all(engine.live.index.built(uid) is None for uid in uids)
    return uids


async def cold_tails_let_go(engine: Engine) -> None:
    """Wait until every append to a sleeping stream is flushed and visible (no ``ColdTail`` left)."""
    deadline = time.monotonic() + 30
    while len(engine.live.index.cold_tails):
        assert time.monotonic() < deadline, "the cold tails were not let go"
        await asyncio.sleep(0.02)
