"""A real ``Storage`` + ``Engine`` in this process on a local Delta table, recovered and started,
for the tests of the engine's state that need no HTTP (``servers.ServerProcess`` runs the CLI)."""

from __future__ import annotations

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
