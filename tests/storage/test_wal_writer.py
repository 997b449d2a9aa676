"""The WAL writer's group commit on a real directory: where each batch is synced.

A lone record on a fast disk is written and synced on the loop's thread (no thread hand-offs
for a client appending alone); several records, a slow disk (the typical recent sync above
``INLINE_SYNC_S``) or a rotation go to a worker thread, so requests keep being served while
it waits. Either way a record is durable (replayable) before its waiter is woken.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from durable_streams_server.storage.acks import Acknowledgements
from durable_streams_server.storage.records import AppendHeader, Header, Record, decode_frames, encode
from durable_streams_server.storage.wal import WriteAheadLog
from durable_streams_server.storage.wal_writer import INLINE_SYNC_S, LONE_SYNC_S, QUIET_S, RECENT_SYNCS, WalWriter

T = TypeVar("T")


class _ThreadNotingLog(WriteAheadLog):
    """The real log, noting which thread wrote each batch and how many frames it held."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.writes: list[tuple[int, int]] = []

    def write(self, frames: list[bytes]) -> None:
        self.writes.append((threading.get_ident(), len(frames)))
        super().write(frames)


def _record(lsn: int) -> Record[Header]:
    return Record(lsn, 1, AppendHeader(lsn - 1, 0, None, None, False), (f"m{lsn}".encode(),))


async def _append(writer: WalWriter, acks: Acknowledgements, count: int) -> None:
    """``count`` records queued at once (one batch), each awaited until durable."""
    lsns = [acks.stamp() for _ in range(count)]
    for lsn in lsns:
        writer.queue(lsn, encode(_record(lsn)))
    await asyncio.gather(*(acks.wait(lsn) for lsn in lsns))


def _started(wal: WriteAheadLog) -> tuple[Acknowledgements, WalWriter, asyncio.Task[None]]:
    """A writer on ``wal`` from LSN 1, its task running (inside a running loop)."""
    acks = Acknowledgements()
    writer = WalWriter(wal, acks, lambda error: None)
    writer.recovered(0)
    return acks, writer, asyncio.create_task(writer.run())


def _run(tmp_path: Path, batches: list[int], sync_s: float = 0.0) -> tuple[_ThreadNotingLog, int]:
    """Write the batches through a writer, its average sync set to ``sync_s`` before each
    (whatever this disk's syncs took meanwhile); return the log and the loop's thread."""
    wal = _ThreadNotingLog(tmp_path / "wal")
    failures: list[OSError] = []

    async def main() -> int:
        acks = Acknowledgements()
        writer = WalWriter(wal, acks, failures.append)
        writer.recovered(0)
        task = asyncio.create_task(writer.run())
        for count in batches:
            writer.sync_s = sync_s
            await _append(writer, acks, count)
            assert acks.durable_lsn == acks.next_lsn - 1
        writer.close()
        await task
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert not failures
    return wal, loop_thread


def test_a_lone_record_on_a_fast_disk_is_synced_on_the_loop_thread(tmp_path: Path) -> None:
    wal, loop_thread = _run(tmp_path, [1, 1, 1])
    assert wal.writes == [(loop_thread, 1)] * 3
    replayed = [record.lsn for record in WriteAheadLog(tmp_path / "wal").replay()]
    assert replayed == [1, 2, 3]


def test_several_records_are_synced_on_a_worker_thread(tmp_path: Path) -> None:
    wal, loop_thread = _run(tmp_path, [5, 3])
    assert [count for _, count in wal.writes] == [5, 3]
    assert all(thread != loop_thread for thread, _ in wal.writes)
    assert [record.lsn for record in WriteAheadLog(tmp_path / "wal").replay()] == list(range(1, 9))


def test_on_a_slow_disk_even_a_lone_record_is_synced_on_a_worker_thread(tmp_path: Path) -> None:
    wal, loop_thread = _run(tmp_path, [1, 1], sync_s=INLINE_SYNC_S * 4)
    assert len(wal.writes) == 2
    assert all(thread != loop_thread for thread, _ in wal.writes)
    assert [record.lsn for record in WriteAheadLog(tmp_path / "wal").replay()] == [1, 2]


def test_the_typical_sync_follows_the_disk_not_one_slow_sync(tmp_path: Path) -> None:
    """``sync_s`` is the median of the recent syncs: one slow sync among quick ones leaves it
    (and where lone records sync) as it was; a run of them moves it."""
    writer = WalWriter(WriteAheadLog(tmp_path / "wal"), Acknowledgements(), lambda error: None)
    for _ in range(20):
        writer._synced(0.0002)
    writer._synced(0.005)
    assert writer.sync_s == 0.0002
    for _ in range(RECENT_SYNCS // 2):
        writer._synced(0.005)
    assert writer.sync_s == 0.005 > INLINE_SYNC_S


def test_the_typical_sync_comes_back_with_quick_syncs(tmp_path: Path) -> None:
    """A writer that measured slow syncs moves lone records to the thread on its own, and
    back once syncs are quick again: the median is of real syncs (a fresh writer on this
    disk measures well under a second)."""
    wal = WriteAheadLog(tmp_path / "wal")

    async def main() -> float:
        acks, writer, task = _started(wal)
        for _ in range(RECENT_SYNCS):
            writer._synced(1.0)
        assert writer.sync_s == 1.0
        for _ in range(60):
            await _append(writer, acks, 1)
        writer.close()
        await task
        return writer.sync_s

    assert 0 < asyncio.run(main()) < 0.5


class _QueueingLog(_ThreadNotingLog):
    """Runs ``during_first_write`` inside the first write (as the loop would queue frames and
    ask for a rotation while a batch syncs on the worker thread)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.during_first_write: list[Callable[[], None]] = []

    def write(self, frames: list[bytes]) -> None:
        hooks, self.during_first_write = self.during_first_write, []
        for hook in hooks:
            hook()
        super().write(frames)


class _CountingExecutor(ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.jobs = 0

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        self.jobs += 1
        return super().submit(fn, *args, **kwargs)


def _segments(directory: Path) -> dict[int, list[int]]:
    """The LSNs each segment holds, by the LSN it is named after."""
    segments = {}
    for path in sorted(directory.glob("*.wal")):
        segments[int(path.stem)] = [record.lsn for record, _ in decode_frames(path.read_bytes())]
    return segments


def _queue(writer: WalWriter, acks: Acknowledgements, count: int) -> list[int]:
    lsns = [acks.stamp() for _ in range(count)]
    for lsn in lsns:
        writer.queue(lsn, encode(_record(lsn)))
    return lsns


def test_frames_queued_while_a_batch_syncs_are_synced_by_the_worker_at_once(tmp_path: Path) -> None:
    """The worker takes the next batch as soon as its sync returns, without waiting for the
    writer task's turn on the loop; every waiter is woken, every frame replays in order."""
    wal = _QueueingLog(tmp_path / "wal")

    executor = _CountingExecutor()

    async def main() -> int:
        asyncio.get_running_loop().set_default_executor(executor)
        acks, writer, task = _started(wal)
        later: list[int] = []
        wal.during_first_write.append(lambda: later.extend(_queue(writer, acks, 3)))
        first = _queue(writer, acks, 5)
        await asyncio.gather(*(acks.wait(lsn) for lsn in first))
        await asyncio.gather(*(acks.wait(lsn) for lsn in later))
        writer.close()
        await task
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert [count for _, count in wal.writes] == [5, 3]
    assert all(thread != loop_thread for thread, _ in wal.writes)
    assert executor.jobs == 1  # both batches in one job: the writer task was not waited for
    assert [record.lsn for record in WriteAheadLog(tmp_path / "wal").replay()] == list(range(1, 9))


def test_the_worker_leaves_frames_past_a_rotation_cut_to_the_writer_task(tmp_path: Path) -> None:
    """A rotation asked for while a batch syncs: the frames queued after it (at or past the
    cut) go into the new segment, never into the one below the cut, which is deleted once
    Delta holds everything below it."""
    wal = _QueueingLog(tmp_path / "wal")

    async def main() -> None:
        acks, writer, task = _started(wal)
        later: list[int] = []

        def rotate_then_queue() -> None:
            writer.rotate_at(acks.next_lsn)  # (the flusher's cut: everything submitted so far)
            later.extend(_queue(writer, acks, 4))

        wal.during_first_write.append(rotate_then_queue)
        first = _queue(writer, acks, 5)
        await asyncio.gather(*(acks.wait(lsn) for lsn in first + later))
        writer.close()
        await task

    asyncio.run(main())
    assert _segments(tmp_path / "wal") == {1: [1, 2, 3, 4, 5], 6: [6, 7, 8, 9]}


def test_a_cancelled_writer_task_leaves_its_worker_no_further_batches(tmp_path: Path) -> None:
    """The writer task cancelled while its worker syncs (a loop shut down abruptly): the worker
    finishes the batch it is writing and takes no more, so nothing writes to the log after
    the owner may have closed it."""
    wal = _QueueingLog(tmp_path / "wal")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        acks, writer, task = _started(wal)

        def cancel_then_queue() -> None:
            loop.call_soon_threadsafe(task.cancel)
            _queue(writer, acks, 3)
            time.sleep(0.2)  # (the cancellation reaches the task while this batch is being written)

        wal.during_first_write.append(cancel_then_queue)
        _queue(writer, acks, 5)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())  # (waits for the worker thread at the end)
    assert [count for _, count in wal.writes] == [5]


# -- a lone record after a quiet spell, synced by its own request (``sync_lone``) -------------


async def _quiet() -> None:
    """Past a quiet spell, the writer task's turns taken meanwhile."""
    await asyncio.sleep(QUIET_S * 5)


def test_after_a_quiet_spell_a_lone_record_is_synced_by_its_own_request(tmp_path: Path) -> None:
    """Durable when ``sync_lone`` returns, written on the loop's thread; the writer task, woken
    by the queueing, then finds nothing to write."""
    wal = _ThreadNotingLog(tmp_path / "wal")

    async def main() -> int:
        acks, writer, task = _started(wal)
        writer.sync_s = 0.0
        await _quiet()
        (lsn,) = _queue(writer, acks, 1)
        writer.sync_lone(lsn)
        assert acks.is_durable(lsn)
        await asyncio.sleep(0.01)  # (the writer task's turn)
        writer.close()
        await task
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert wal.writes == [(loop_thread, 1)]
    assert [record.lsn for record in WriteAheadLog(tmp_path / "wal").replay()] == [1]


def test_a_lone_record_after_a_quiet_spell_is_synced_by_its_request_on_a_disk_a_little_slower(
    tmp_path: Path,
) -> None:
    """Up to ``LONE_SYNC_S`` (beyond the writer task's ``INLINE_SYNC_S``) the request syncs its
    record itself; beyond it, the writer task takes it to the worker thread."""
    wal = _ThreadNotingLog(tmp_path / "wal")

    async def main() -> tuple[list[bool], int]:
        acks, writer, task = _started(wal)
        synced_at_once = []
        for typical in ((INLINE_SYNC_S + LONE_SYNC_S) / 2, LONE_SYNC_S * 2):
            await _quiet()
            (lsn,) = _queue(writer, acks, 1)
            writer.sync_s = typical
            writer.sync_lone(lsn)
            synced_at_once.append(acks.is_durable(lsn))
            await acks.wait(lsn)
        writer.close()
        await task
        return synced_at_once, threading.get_ident()

    synced_at_once, loop_thread = asyncio.run(main())
    assert synced_at_once == [True, False]
    assert [thread == loop_thread for thread, _ in wal.writes] == [True, False]


def test_in_a_burst_only_the_first_lone_record_is_synced_by_its_request(tmp_path: Path) -> None:
    """The requests after it find a sync that just ended and leave their records to the writer
    task, which batches them; so do records queued behind others, or behind a rotation."""
    wal = _ThreadNotingLog(tmp_path / "wal")

    async def main() -> list[bool]:
        acks, writer, task = _started(wal)
        writer.sync_s = 0.0
        synced_at_once = []
        await _quiet()
        for _ in range(3):  # one after the other, as requests in one turn of the loop
            (lsn,) = _queue(writer, acks, 1)
            writer.sync_s = 0.0  # (each time: only what this test is about decides)
            writer.sync_lone(lsn)
            synced_at_once.append(acks.is_durable(lsn))
        await acks.wait(acks.next_lsn - 1)
        await _quiet()
        two = _queue(writer, acks, 2)
        writer.sync_s = 0.0
        writer.sync_lone(two[1])
        synced_at_once.append(acks.is_durable(two[1]))
        await acks.wait(two[1])
        await _quiet()
        writer.rotate_at(acks.next_lsn)
        (lsn,) = _queue(writer, acks, 1)
        writer.sync_s = 0.0
        writer.sync_lone(lsn)
        synced_at_once.append(acks.is_durable(lsn))
        await acks.wait(lsn)
        writer.close()
        await task
        return synced_at_once

    assert asyncio.run(main()) == [True, False, False, False, False]
    assert [count for _, count in wal.writes] == [1, 2, 2, 1]
    assert _segments(tmp_path / "wal") == {1: [1, 2, 3, 4, 5], 6: [6]}


def test_a_lone_record_is_not_synced_by_its_request_while_the_worker_writes(tmp_path: Path) -> None:
    """While a batch syncs on the worker thread, a record queued meanwhile is the worker's to
    take (``_drain``): the loop's thread never writes beside it."""
    wal = _QueueingLog(tmp_path / "wal")

    async def main() -> tuple[bool, int]:
        loop = asyncio.get_running_loop()
        acks, writer, task = _started(wal)
        writer.sync_s = 0.0
        queued: asyncio.Future[int] = loop.create_future()
        tried: list[bool] = []

        def queue_and_try() -> None:  # on the loop, while the worker is in its first write
            (lsn,) = _queue(writer, acks, 1)
            writer.sync_s = 0.0
            writer.sync_lone(lsn)
            tried.append(acks.is_durable(lsn))
            queued.set_result(lsn)

        def during_write() -> None:
            loop.call_soon_threadsafe(queue_and_try)
            time.sleep(QUIET_S * 20)  # (long past a quiet spell: only the worker keeps it away)

        wal.during_first_write.append(during_write)
        await _quiet()
        first = _queue(writer, acks, 3)
        await asyncio.gather(*(acks.wait(lsn) for lsn in first))
        await acks.wait(await queued)
        writer.close()
        await task
        return tried[0], threading.get_ident()

    synced_at_once, loop_thread = asyncio.run(main())
    assert not synced_at_once
    assert [count for _, count in wal.writes] == [3, 1]
    assert all(thread != loop_thread for thread, _ in wal.writes)
    assert [record.lsn for record in WriteAheadLog(tmp_path / "wal").replay()] == [1, 2, 3, 4]


class _FailingLog(WriteAheadLog):
    def write(self, frames: list[bytes]) -> None:
        raise OSError(5, "Input/output error")


def test_a_failed_sync_by_the_request_is_fatal_as_the_writers_are(tmp_path: Path) -> None:
    """The record is not durable, the owner hears of the failure once, and the writer task ends."""
    failures: list[OSError] = []

    async def main() -> bool:
        acks = Acknowledgements()
        writer = WalWriter(_FailingLog(tmp_path / "wal"), acks, failures.append)
        writer.recovered(0)
        task = asyncio.create_task(writer.run())
        await _quiet()
        (lsn,) = _queue(writer, acks, 1)
        writer.sync_lone(lsn)
        await asyncio.wait_for(task, timeout=5)
        return acks.is_durable(lsn)

    assert asyncio.run(main()) is False
    assert [error.errno for error in failures] == [5]
