"""What storage reports about itself through an outage: the contract /metrics reads.

A real ``Storage`` + ``Engine`` in this process, on moto's S3 server behind a relay that
takes the endpoint away (tests/outage_relay.py), with an observer that records calls.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from outage_relay import S3Endpoint
from servers import MotoServer
from wal_support import records_on_disk

from durable_streams_server.engine.engine import Engine
from durable_streams_server.engine.types import AppendRequest, CreateRequest
from durable_streams_server.protocol.errors import ServiceUnavailable
from durable_streams_server.storage.committer import Durability, Storage, StorageConfig
from durable_streams_server.storage.compaction import CompactionConfig

NAME = "v1/stream/health"
MAX_WAL_BYTES = 16 * 1024


class Recorder:
    def __init__(self) -> None:
        self.commits: list[bool] = []
        self.compactions: list[bool] = []

    def delta_commit(self, seconds: float, ok: bool) -> None:
        assert seconds >= 0
        self.commits.append(ok)

    def compaction(self, seconds: float, ok: bool) -> None:
        assert seconds >= 0
        self.compactions.append(ok)


@pytest.fixture
def s3(moto: MotoServer) -> Iterator[S3Endpoint]:
    with S3Endpoint(moto.port) as endpoint:
        yield endpoint


async def _open(
    tmp_path: Path, moto: MotoServer, s3: S3Endpoint, durability: Durability, recorder: Recorder
) -> tuple[Storage, Engine]:
    bucket = f"health-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    config = StorageConfig(
        data_dir=tmp_path,
        storage_uri=f"s3://{bucket}/ds",
        storage_options=s3.storage_options(moto),
        durability=durability,
        flush_interval_s=0.1,
        max_wal_bytes=MAX_WAL_BYTES,
        compaction=CompactionConfig(interval_s=0),
    )
    storage = Storage(config, recorder)
    engine = Engine(storage)
    engine.load(storage.recover())
    await storage.start()
    await engine.create(CreateRequest(NAME, "text/plain", None, None, None, False, b""))
    return storage, engine


def _append(engine: Engine, body: bytes) -> asyncio.Task[object]:
    return asyncio.ensure_future(engine.append(NAME, AppendRequest(body, "text/plain", None, None, False)))


async def _until(predicate: object, timeout_s: float = 60) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def _on_disk(tmp_path: Path) -> int:
    return records_on_disk(tmp_path / "wal")


def test_wal_mode_reports_and_refuses_over_the_cap_then_recovers(
    tmp_path: Path, moto: MotoServer, s3: S3Endpoint
) -> None:
    async def scenario() -> None:
        recorder = Recorder()
        storage, engine = await _open(tmp_path, moto, s3, "wal", recorder)
        await _until(lambda: storage.flush_lag_s == 0.0)
        assert storage.degraded is None and storage.unflushed_bytes == 0 and recorder.commits[-1] is True
        await storage.compact()
        assert recorder.compactions == [True]

        s3.down()
        await _append(engine, b"x" * 1000)
        await _until(lambda: storage.degraded is not None)
        assert (storage.degraded or "").startswith("delta commits failing since ")
        assert False in recorder.commits
        stream = engine.streams[NAME]
        while True:  # acknowledged (WAL-durable) until the WAL is over its cap
            try:
                await _append(engine, b"y" * 1000)
            except ServiceUnavailable as refused:
                assert refused.code == "WAL_FULL" and refused.retry_after_s is not None and refused.retry_after_s >= 1
                break
            assert storage.wal_bytes == _on_disk(tmp_path)
        assert storage.wal_bytes == _on_disk(tmp_path) > MAX_WAL_BYTES
        assert (storage.degraded or "").startswith("WAL over its 16 KiB cap (delta commits failing since ")
        tail = stream.tail
        with pytest.raises(ServiceUnavailable):
            await _append(engine, b"z")
        assert stream.tail == tail, "a refused write must not change memory"
        assert storage.unflushed_bytes > MAX_WAL_BYTES // 2 and storage.flush_lag_s > 0
        with pytest.raises(Exception):  # noqa: B017 - whatever the object store raised
            await storage.compact()
        assert recorder.compactions == [True, False]

        s3.up()
        await _until(lambda: storage.degraded is None and storage.flush_lag_s == 0.0)
        assert storage.unflushed_bytes == 0 and recorder.commits[-1] is True
        # The flusher truncates the WAL on a worker thread: wait for the gauge and the disk to agree
        # (reading one, then the other, can straddle a truncation).
        await _until(lambda: storage.wal_bytes == _on_disk(tmp_path) < MAX_WAL_BYTES)
        await _append(engine, b"accepted again")
        await storage.close()

    asyncio.run(scenario())


def test_delta_mode_fails_waiters_and_refuses_until_a_commit_succeeds(
    tmp_path: Path, moto: MotoServer, s3: S3Endpoint
) -> None:
    async def scenario() -> None:
        storage, engine = await _open(tmp_path, moto, s3, "delta", Recorder())
        stream = engine.streams[NAME]
        s3.down()
        with pytest.raises(ServiceUnavailable) as in_doubt:
            await _append(engine, b"in doubt")
        assert in_doubt.value.code == "COMMIT_IN_DOUBT"
        assert stream.visible_tail == 0, "readers must not see what is not committed"
        assert (storage.degraded or "").startswith("delta commits failing since ")
        assert storage.wal_bytes == 0 and storage.unflushed_bytes > 0
        tail = stream.tail
        with pytest.raises(ServiceUnavailable) as refused:
            await _append(engine, b"refused")
        assert refused.value.code == "DELTA_UNAVAILABLE" and stream.tail == tail

        s3.up()
        await _until(lambda: storage.degraded is None and stream.visible_tail == tail)
        await _append(engine, b"accepted again")
        assert stream.visible_tail == tail + 1
        await storage.close()

    asyncio.run(scenario())


def test_a_wal_write_failure_answers_503_at_once_and_until_restart(tmp_path: Path) -> None:
    """The WAL's file descriptor is pointed at /dev/full: the next write fails with ENOSPC,
    as on a full disk, and no request may hang on it."""

    async def scenario() -> None:
        config = StorageConfig(tmp_path, str(tmp_path / "delta"), {}, compaction=CompactionConfig(interval_s=0))
        storage = Storage(config)
        engine = Engine(storage)
        engine.load(storage.recover())
        await storage.start()
        await engine.create(CreateRequest(NAME, "text/plain", None, None, None, False, b""))
        assert storage.wal is not None and storage.wal._fd is not None
        full = os.open("/dev/full", os.O_WRONLY)
        os.dup2(full, storage.wal._fd)
        os.close(full)
        with pytest.raises(ServiceUnavailable) as failed:
            await asyncio.wait_for(_append(engine, b"lost"), timeout=30)
        assert failed.value.code == "STORAGE_FAILED"
        assert (storage.degraded or "").startswith("storage failed, writes refused until restart")
        tail = engine.streams[NAME].tail
        with pytest.raises(ServiceUnavailable) as refused:
            await _append(engine, b"refused")
        assert refused.value.code == "STORAGE_FAILED" and engine.streams[NAME].tail == tail
        await asyncio.wait_for(storage.close(), timeout=30)

    asyncio.run(scenario())
