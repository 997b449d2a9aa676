"""The WAL writer's group commit on a real directory, under storage's sync policy.

Every write and sync of the log runs on the dedicated sync thread, never on the loop's: a
lone record, several at once, a record after a quiet spell, frames queued while a batch
syncs, segment cuts, the first segment after recovery, a failing disk. That is checked at
the system calls themselves (``wal_support.DiskCalls``). A record is durable (replayable)
before its waiter is woken; the next batch is taken as soon as a sync returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from wal_support import DiskCalls

from durable_streams_server.storage.acks import Acknowledgements
from durable_streams_server.storage.records import AppendHeader, Header, Record, decode_frames, encode
from durable_streams_server.storage.sync_policy import THREAD_NAME
from durable_streams_server.storage.wal import WriteAheadLog
from durable_streams_server.storage.wal_writer import WalWriter

T = TypeVar("T")


class _ThreadNotingLog(WriteAheadLog):
    """The real log, noting which thread wrote each batch and how many frames it held; runs
    ``during_first_write`` inside the first write (as the loop queues frames and asks for a
    cut while a batch syncs)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.writes: list[tuple[int, int]] = []
        self.returned = 0
        """Writes that have returned (every frame written and synced)."""
        self.during_first_write: list[Callable[[], None]] = []

    def write(self, frames: list[bytes]) -> None:
        hooks, self.during_first_write = self.during_first_write, []
        for hook in hooks:
            hook()
        self.writes.append((threading.get_ident(), len(frames)))
        super().write(frames)
        self.returned += 1


def _record(lsn: int) -> Record[Header]:
    return Record(lsn, 1, AppendHeader(lsn - 1, 0, None, None, False), (f"m{lsn}".encode(),))


def _queue(writer: WalWriter, acks: Acknowledgements, count: int) -> list[int]:
    lsns = [acks.stamp() for _ in range(count)]
    for lsn in lsns:
        writer.queue(lsn, encode(_record(lsn)))
    return lsns


def _on_loop(loop: asyncio.AbstractEventLoop, action: Callable[[], T]) -> T:
    """``action`` run on the loop, as the loop's requests submit records, from a write on the
    sync thread (a hook of ``_ThreadNotingLog``); returns once that turn of the loop has ended,
    so what it queued has been handed over while the write is still in progress."""

    async def turn() -> T:
        result = action()
        await asyncio.sleep(0)  # (the turn ends: the records it queued are handed over)
        return result

    return asyncio.run_coroutine_threadsafe(turn(), loop).result(timeout=30)


async def _append(writer: WalWriter, acks: Acknowledgements, count: int) -> None:
    """``count`` records queued at once, each awaited until durable."""
    await asyncio.gather(*(acks.wait(lsn) for lsn in _queue(writer, acks, count)))


def _started(wal: WriteAheadLog) -> tuple[Acknowledgements, WalWriter, asyncio.Task[None]]:
    """A writer on ``wal`` from LSN 1, its task running (inside a running loop)."""
    acks = Acknowledgements()
    writer = WalWriter(wal, acks, lambda error: None)
    writer.recovered(0)
    return acks, writer, asyncio.create_task(writer.run())


async def _closed(writer: WalWriter, task: asyncio.Task[None]) -> None:
    writer.close()
    await asyncio.wait_for(task, timeout=30)


def _segments(directory: Path) -> dict[int, list[int]]:
    """The LSNs each segment holds, by the LSN it is named after."""
    segments = {}
    for path in sorted(directory.glob("*.wal")):
        segments[int(path.stem)] = [record.lsn for record, _ in decode_frames(path.read_bytes())]
    return segments


def _replayed(directory: Path) -> list[int]:
    return [record.lsn for record in WriteAheadLog(directory).replay()]


def test_no_write_or_sync_of_the_log_runs_on_the_loop_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every path, seen at the system calls: the first segment after recovery, lone records
    (also after a quiet spell: an idle loop), several at once, frames queued while a batch
    syncs, a cut between batches and one inside a batch, and the close. All of them on the
    sync thread; the acknowledgements on the loop's."""
    directory = tmp_path / "wal"
    calls = DiskCalls(directory).install(monkeypatch)
    wal = _ThreadNotingLog(directory)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        acks, writer, task = _started(wal)
        await _append(writer, acks, 1)
        await asyncio.sleep(0.05)  # (an idle loop: no quiet-spell path may sync on it)
        await _append(writer, acks, 1)
        await _append(writer, acks, 6)
        # (queued while that batch syncs)
        wal.during_first_write.append(lambda: _on_loop(loop, lambda: _queue(writer, acks, 3)))
        await _append(writer, acks, 2)
        await acks.wait(acks.next_lsn - 1)
        writer.rotate_at(acks.next_lsn)  # a cut between batches
        await _append(writer, acks, 1)
        _queue(writer, acks, 2)
        writer.rotate_at(acks.next_lsn)  # a cut inside a batch
        await _append(writer, acks, 2)
        await _closed(writer, task)
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    names = {call.name for call in calls.calls}
    assert {"pwritev", "fsync", "posix_fallocate"} <= names  # (the writes, the directory, the preallocation)
    on_loop = [call for call in calls.calls if call.thread == loop_thread]
    assert on_loop == []
    assert {call.thread_name for call in calls.calls} == {THREAD_NAME}
    assert _segments(directory) == {1: list(range(1, 14)), 14: [14, 15, 16], 17: [17, 18]}


def test_lone_records_are_synced_one_by_one_on_the_sync_thread(tmp_path: Path) -> None:
    wal = _ThreadNotingLog(tmp_path / "wal")

    async def main() -> int:
        acks, writer, task = _started(wal)
        for _ in range(3):
            await _append(writer, acks, 1)
            assert acks.durable_lsn == acks.next_lsn - 1
        await _closed(writer, task)
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert [count for _, count in wal.writes] == [1, 1, 1]
    assert len({thread for thread, _ in wal.writes}) == 1
    assert all(thread != loop_thread for thread, _ in wal.writes)
    assert _replayed(tmp_path / "wal") == [1, 2, 3]


def test_records_queued_together_are_one_batch(tmp_path: Path) -> None:
    wal = _ThreadNotingLog(tmp_path / "wal")

    async def main() -> None:
        acks, writer, task = _started(wal)
        await _append(writer, acks, 5)
        await _append(writer, acks, 3)
        await _closed(writer, task)

    asyncio.run(main())
    assert [count for _, count in wal.writes] == [5, 3]
    assert _replayed(tmp_path / "wal") == list(range(1, 9))


def test_the_records_of_one_turn_of_the_loop_are_one_batch(tmp_path: Path) -> None:
    """Records submitted in one turn of the loop (the requests that turn served) reach the
    sync thread together at the turn's end, however long the turn: an idle thread is not woken
    for the turn's first record alone. Here the turn outlasts a sync many times over."""
    wal = _ThreadNotingLog(tmp_path / "wal")

    async def main() -> None:
        acks, writer, task = _started(wal)
        await _append(writer, acks, 1)  # (the sync thread is running, and idle once it returns)
        first = _queue(writer, acks, 1)
        time.sleep(0.2)  # (the rest of a long turn, the GIL released: an idle thread could take the first)
        second = _queue(writer, acks, 2)
        await asyncio.gather(*(acks.wait(lsn) for lsn in first + second))
        await _closed(writer, task)

    asyncio.run(main())
    assert [count for _, count in wal.writes] == [1, 3]
    assert _replayed(tmp_path / "wal") == [1, 2, 3, 4]


def test_frames_queued_while_a_batch_syncs_are_the_next_batch(tmp_path: Path) -> None:
    """The thread takes what accumulated as soon as its sync returns, in one batch; every
    waiter is woken, every frame replays in order."""
    wal = _ThreadNotingLog(tmp_path / "wal")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        acks, writer, task = _started(wal)
        later: list[int] = []
        wal.during_first_write.append(lambda: later.extend(_on_loop(loop, lambda: _queue(writer, acks, 3))))
        first = _queue(writer, acks, 5)
        await asyncio.gather(*(acks.wait(lsn) for lsn in first))
        await asyncio.gather(*(acks.wait(lsn) for lsn in later))
        await _closed(writer, task)

    asyncio.run(main())
    assert [count for _, count in wal.writes] == [5, 3]
    assert _replayed(tmp_path / "wal") == list(range(1, 9))


def test_a_cut_asked_for_while_a_batch_syncs_starts_the_next_segment(tmp_path: Path) -> None:
    """The frames queued after the cut go into the new segment, never into the one below the
    cut, which is deleted once Delta holds everything below it."""
    wal = _ThreadNotingLog(tmp_path / "wal")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        acks, writer, task = _started(wal)
        later: list[int] = []

        def cut_then_queue() -> None:
            writer.rotate_at(acks.next_lsn)  # (the flusher's cut: everything submitted so far)
            later.extend(_queue(writer, acks, 4))

        wal.during_first_write.append(lambda: _on_loop(loop, cut_then_queue))
        first = _queue(writer, acks, 5)
        await asyncio.gather(*(acks.wait(lsn) for lsn in first + later))
        await _closed(writer, task)

    asyncio.run(main())
    assert _segments(tmp_path / "wal") == {1: [1, 2, 3, 4, 5], 6: [6, 7, 8, 9]}


def test_close_writes_everything_queued_before_run_returns(tmp_path: Path) -> None:
    wal = _ThreadNotingLog(tmp_path / "wal")

    async def main() -> int:
        acks, writer, task = _started(wal)
        _queue(writer, acks, 4)
        writer.close()
        await asyncio.wait_for(task, timeout=30)
        return acks.durable_lsn

    assert asyncio.run(main()) == 4
    assert _replayed(tmp_path / "wal") == [1, 2, 3, 4]


def test_a_cancelled_writer_task_leaves_its_thread_no_further_batches(tmp_path: Path) -> None:
    """The writer task cancelled while a batch syncs (a loop shut down abruptly), with more
    frames queued: the thread finishes the batch it is writing and takes no more, and the
    task ends only after that batch, so nothing writes to the log after the owner may have
    closed it. Each step waits for the one before it (no timing)."""
    wal = _ThreadNotingLog(tmp_path / "wal")
    failures: list[OSError] = []
    abandoned_during_write: list[bool] = []
    returned_when_task_ended: list[int] = []

    async def main() -> WalWriter:
        loop = asyncio.get_running_loop()
        acks = Acknowledgements()
        writer = WalWriter(wal, acks, failures.append)
        writer.recovered(0)
        task = asyncio.create_task(writer.run())
        task.add_done_callback(lambda _: returned_when_task_ended.append(wal.returned))

        def queue_then_cancel() -> None:  # (on the loop)
            _queue(writer, acks, 3)
            task.cancel()

        def during_first_write() -> None:  # (on the sync thread: it only waits, and notes)
            loop.call_soon_threadsafe(queue_then_cancel)
            abandoned_during_write.append(writer.policy.abandoned.wait(30))

        wal.during_first_write.append(during_first_write)
        _queue(writer, acks, 5)
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return writer

    writer = asyncio.run(main())
    assert writer.policy.thread is not None
    writer.policy.thread.join(timeout=30)
    assert not writer.policy.thread.is_alive()
    assert failures == []
    assert abandoned_during_write == [True]  # (the cancellation reached the writer in its first batch)
    assert returned_when_task_ended == [1]  # (the task outlasted the batch in progress)
    assert [count for _, count in wal.writes] == [5]
    assert _replayed(tmp_path / "wal") == [1, 2, 3, 4, 5]


class _FailingLog(WriteAheadLog):
    def write(self, frames: list[bytes]) -> None:
        raise OSError(5, "Input/output error")


def test_a_failed_write_is_fatal(tmp_path: Path) -> None:
    """The record is not durable, the owner hears of the failure once, on the loop's thread,
    and the writer task ends."""
    failures: list[tuple[int, int | None]] = []

    async def main() -> tuple[bool, int]:
        acks = Acknowledgements()
        writer = WalWriter(
            _FailingLog(tmp_path / "wal"), acks, lambda error: failures.append((threading.get_ident(), error.errno))
        )
        writer.recovered(0)
        task = asyncio.create_task(writer.run())
        (lsn,) = _queue(writer, acks, 1)
        await asyncio.wait_for(task, timeout=30)
        return acks.is_durable(lsn), threading.get_ident()

    durable, loop_thread = asyncio.run(main())
    assert durable is False
    assert failures == [(loop_thread, 5)]
