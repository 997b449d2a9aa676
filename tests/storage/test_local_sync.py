"""A local table's commits are fsynced before they count (``storage.local_sync``): the data
files each one adds, its log entry, the log checkpoints, the directories; the flusher drops
WAL segments only after that; a server's start syncs what a killed one left unsynced.

Real Delta tables on the local disk; ``os.fsync`` wrapped to note the path of each file it
is given (and then called for real)."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import orjson
import pytest

from durable_streams_server.engine.engine import Engine
from durable_streams_server.engine.types import AppendRequest, CreateRequest
from durable_streams_server.storage.committer import Storage, StorageConfig
from durable_streams_server.storage.compaction import CompactionConfig
from durable_streams_server.storage.delta_log import APP_ID, DeltaLog
from durable_streams_server.storage.local_sync import LocalSync, TornCommit
from durable_streams_server.storage.wal import WriteAheadLog

Events = list[tuple[str, Any]]


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> Iterator[Events]:
    """``("fsync", path)`` for every fsync in this process, in order."""
    noted: Events = []
    real = os.fsync

    def fsync(fd: int) -> None:
        noted.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    yield noted


def _state(uid: int, tail: int) -> dict[str, Any]:
    return {"name": f"v1/stream/s{uid}", "uid": uid, "tail": tail, "written_ms": 1000 + tail}


def _entry(delta: DeltaLog, version: int) -> Path:
    return Path(delta.uri) / "_delta_log" / f"{version:020d}.json"


def _version_files(delta: DeltaLog, version: int) -> set[str]:
    """The files a version's commit wrote: the data files its log entry adds, the entry."""
    entry = _entry(delta, version)
    added = set()
    for line in entry.read_bytes().splitlines():
        action = orjson.loads(line)
        if "add" in action:
            added.add(str(Path(delta.uri) / unquote(action["add"]["path"])))
    assert added, f"version {version} adds no file"
    return {*added, str(entry)}


def _synced(events: Events) -> set[str]:
    return {path for kind, path in events if kind == "fsync"}


def test_a_commit_returns_once_its_files_and_directories_are_synced(tmp_path: Path, events: Events) -> None:
    delta = DeltaLog(str(tmp_path), {})
    events.clear()
    delta.commit([], {1: _state(1, 3), 2: _state(2, 5)}, 7)
    version = delta._table.version()
    assert _version_files(delta, version) <= _synced(events)
    assert {delta.uri, delta.uri + "/_delta_log"} <= _synced(events)
    # The directories after the files they name (a name is durable once its directory is).
    order = [path for _, path in events]
    assert order.index(delta.uri + "/_delta_log") > order.index(str(_entry(delta, version)))


def test_compaction_rewrites_and_state_checkpoints_are_synced_too(tmp_path: Path, events: Events) -> None:
    delta = DeltaLog(str(tmp_path), {})
    delta.commit([], {1: _state(1, 3)}, 1)
    delta.commit([], {1: _state(1, 4)}, 2)
    events.clear()
    assert delta.write_state_checkpoint() == 1
    assert _version_files(delta, delta._table.version()) <= _synced(events)
    events.clear()
    delta.delete("stream_uid = 1 AND lsn < 2")
    assert str(_entry(delta, delta._table.version())) in _synced(events)


def test_log_checkpoints_are_synced_before_the_log_is_trimmed_down_to_them(tmp_path: Path, events: Events) -> None:
    delta = DeltaLog(str(tmp_path), {}, checkpoint_interval=5)
    for lsn in range(1, 5):  # versions 1..4: delta-rs writes a checkpoint after version 4
        delta.commit([], {1: _state(1, lsn)}, lsn)
    log_dir = Path(delta.uri) / "_delta_log"
    checkpoint = log_dir / f"{4:020d}.checkpoint.parquet"
    assert checkpoint.exists()
    assert {str(checkpoint), str(log_dir / "_last_checkpoint")} <= _synced(events)


def test_the_flusher_drops_wal_segments_only_after_the_commit_holding_them_is_synced(
    tmp_path: Path, events: Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_drop: Callable[[WriteAheadLog, int], int] = WriteAheadLog.drop_through

    def drop_through(wal: WriteAheadLog, lsn: int) -> int:
        events.append(("drop", lsn))
        return real_drop(wal, lsn)

    monkeypatch.setattr(WriteAheadLog, "drop_through", drop_through)

    async def scenario() -> DeltaLog:
        config = StorageConfig(
            data_dir=tmp_path / "data",
            storage_uri=str(tmp_path / "delta"),
            storage_options={},
            flush_interval_s=0.05,
            compaction=CompactionConfig(interval_s=0),
        )
        storage = Storage(config)
        engine = Engine(storage)
        engine.load(storage.recover())
        await storage.start()
        await engine.create(CreateRequest("v1/stream/a", "text/plain", None, None, None, False, b""))
        for index in range(3):
            await engine.append("v1/stream/a", AppendRequest(f"m{index}".encode(), "text/plain", None, None, False))
            for _ in range(1000):  # a flush after each (and its WAL segments dropped)
                if storage.unflushed_bytes == 0:
                    break
                await asyncio.sleep(0.01)
        await storage.close()
        return storage.delta

    delta = asyncio.run(scenario())
    drops = [(index, lsn) for index, (kind, lsn) in enumerate(events) if kind == "drop"]
    assert len(drops) >= 3
    covering = {_txn_version(_entry(delta, version)): version for version in range(1, delta._table.version() + 1)}
    for index, lsn in drops:
        if lsn not in covering:
            continue  # the final drop at close (everything is in Delta already)
        assert _version_files(delta, covering[lsn]) <= _synced(events[:index]), lsn
    assert sum(lsn in covering for _, lsn in drops) >= 3


def _txn_version(entry: Path) -> int | None:
    for line in entry.read_bytes().splitlines():
        action = orjson.loads(line)
        if "txn" in action and action["txn"]["appId"] == APP_ID:  # (the flush's, not the owner's epoch)
            return int(action["txn"]["version"])
    return None


def test_opening_a_table_syncs_what_a_killed_server_left_unsynced(tmp_path: Path, events: Events) -> None:
    killed = DeltaLog(str(tmp_path), {})
    killed._sync = None  # as if killed between its commit and its sync
    killed.commit([], {1: _state(1, 3)}, 4)
    unsynced = _version_files(killed, killed._table.version())
    events.clear()
    DeltaLog(str(tmp_path), {})
    assert unsynced <= _synced(events)


@pytest.mark.parametrize("crash", ["cut short", "missing"])
def test_a_data_file_a_crash_left_torn_stops_the_start(tmp_path: Path, crash: str) -> None:
    """The window ``local_sync`` leaves: the log entry made it to disk, its data file did not
    (whole). The table does not open, saying which file; nothing is changed."""
    killed = DeltaLog(str(tmp_path), {})
    killed.commit([], {1: _state(1, 3)}, 4)
    killed._sync = None  # killed before the next commit's sync, and then the OS crashed
    killed.commit([], {2: _state(2, 5)}, 6)
    (torn,) = [Path(path) for path in _version_files(killed, killed._table.version()) if path.endswith(".parquet")]
    if crash == "missing":
        torn.unlink()
    else:
        torn.write_bytes(torn.read_bytes()[:100])
    with pytest.raises(TornCommit, match=f"commit 2 .* uses {torn.name}, of [0-9,]+ bytes, which is "):
        DeltaLog(str(tmp_path), {})


def test_files_a_later_commit_removed_may_be_gone(tmp_path: Path) -> None:
    delta = DeltaLog(str(tmp_path), {})
    delta.commit([], {1: _state(1, 3)}, 4)
    removed = [Path(path) for path in _version_files(delta, 1) if path.endswith(".parquet")]
    delta.commit([], {2: _state(2, 5)}, 6)
    delta.delete("stream_uid = 1")  # (the first file's only rows: the file is removed, not rewritten)
    for path in removed:
        path.unlink()  # (vacuumed)
    reopened = DeltaLog(str(tmp_path), {})
    assert reopened.committed_lsn() == 6
    assert set(reopened.load_states()) == {2}


def test_a_failed_sync_fails_the_commit_and_every_later_one(
    tmp_path: Path, events: Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    delta = DeltaLog(str(tmp_path), {})
    noting = os.fsync

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError, match="Input/output error"):
        delta.commit([], {1: _state(1, 3)}, 1)
    monkeypatch.setattr(os, "fsync", noting)
    # The commit landed but is not durable: the flusher's retry looks before committing
    # again, and finds it there; it must fail still (the WAL keeps the records).
    with pytest.raises(OSError, match=r"failed earlier.*Input/output error"):
        delta.refreshed_lsn()
    with pytest.raises(OSError, match="failed earlier"):
        delta.commit([], {1: _state(1, 4)}, 2)


@pytest.mark.parametrize(
    ("uri", "local"),
    [
        ("/data/delta/streams", "/data/delta/streams"),
        ("file:///data/delta/streams", "/data/delta/streams"),
        ("file:///data/my%20delta/streams", "/data/my delta/streams"),
        ("s3://bucket/ds/streams", None),
        ("gs://bucket/ds/streams", None),
        ("az://container/ds/streams", None),
        ("abfss://container@account.dfs.core.windows.net/ds/streams", None),
    ],
)
def test_only_local_tables_are_synced(uri: str, local: str | None) -> None:
    sync = LocalSync.for_uri(uri)
    assert (None if sync is None else str(sync.table_dir)) == local
