"""The data directory's lock (``storage/data_dir_lock.py``): one holder at a time, gone with it.

Held by another open of this process, or by another process (a real one, spawned), the lock
refuses, naming its holder; closed, or its holder killed with ``SIGKILL``, it is free at once.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
from pathlib import Path

import pytest

from durable_streams_server.storage.data_dir_lock import DataDirInUse, DataDirLock, held, running_copy
from durable_streams_server.storage.durability import Durability
from durable_streams_server.storage.ownership import Node, Owner, OwnershipError


def test_a_second_holder_is_refused_until_the_first_releases(tmp_path: Path) -> None:
    first = DataDirLock.acquire(tmp_path / "data")
    with pytest.raises(DataDirInUse) as refused:
        DataDirLock.acquire(tmp_path / "data")
    assert f"in use by another server (pid {os.getpid()}, host " in str(refused.value)
    assert isinstance(refused.value, OwnershipError)  # (a refused start, as the server reports one)
    assert first.held
    first.release()
    first.release()  # (again: nothing)
    assert not first.held
    again = DataDirLock.acquire(tmp_path / "data")
    again.release()


def _hold(data_dir: str, held: multiprocessing.synchronize.Event) -> None:
    DataDirLock.acquire(Path(data_dir))
    held.set()
    signal.pause()  # (until killed: the lock goes with the process)


def test_another_process_holds_it_until_it_is_killed(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    held = context.Event()
    holder = context.Process(target=_hold, args=(str(tmp_path / "data"), held), daemon=True)
    holder.start()
    try:
        assert held.wait(60), "the holder did not take the lock"
        with pytest.raises(DataDirInUse) as refused:
            DataDirLock.acquire(tmp_path / "data")
        assert f"(pid {holder.pid}, host " in str(refused.value)
        assert "--data-dir of its own" in str(refused.value)
    finally:
        if holder.pid is not None:
            os.kill(holder.pid, signal.SIGKILL)
        holder.join(30)
    lock = DataDirLock.acquire(tmp_path / "data")  # (no stale lock: the kernel let it go)
    assert f'"pid": {os.getpid()}' in (tmp_path / "data" / "lock").read_text()
    lock.release()


def test_a_probe_tells_a_held_lock_and_creates_nothing(tmp_path: Path) -> None:
    assert not held(tmp_path / "nowhere") and not (tmp_path / "nowhere").exists()
    lock = DataDirLock.acquire(tmp_path / "data")
    assert held(tmp_path / "data")
    lock.release()
    assert not held(tmp_path / "data")
    DataDirLock.acquire(tmp_path / "data").release()  # (the probe let go of what it took)


def test_a_running_copy_is_one_on_this_host_from_another_directory_with_a_wal(tmp_path: Path) -> None:
    """The owner a start would take for itself restarting runs here, from another data dir whose
    lock is held: a copy. Not when the owner ran without a WAL (fenced, it loses nothing), has let
    go, or its directory is this one under another path."""
    original, copy = tmp_path / "original", tmp_path / "copy"
    copy.mkdir()
    (tmp_path / "other-path").symlink_to(copy)
    held_lock = DataDirLock.acquire(original)
    try:
        node = Node("n", data_dir=str(copy), wal_id="w")
        owner = Owner("n", 3, "", str(original), socket.gethostname(), 1, Durability.WAL, wal_id="w")
        refusal = running_copy(node, owner)
        assert refusal is not None and f"data dir {original}, " in str(refusal)
        assert running_copy(node, Owner("n", 3, "", str(original), socket.gethostname(), 1, Durability.DELTA)) is None
        assert running_copy(node, Owner("n", 3, "", str(original), "elsewhere", 1, Durability.WAL)) is None
        released = Owner("n", 3, "", str(original), socket.gethostname(), 1, Durability.WAL, state="released")
        assert running_copy(node, released) is None
        mine = DataDirLock.acquire(copy)  # (this start's own lock, the owner's path another spelling of it)
        try:
            itself = Owner("n", 3, "", str(tmp_path / "other-path"), socket.gethostname(), 1, Durability.WAL)
            assert running_copy(node, itself) is None
        finally:
            mine.release()
    finally:
        held_lock.release()
    assert running_copy(node, owner) is None  # (the original stopped: a restart after all)
