"""Acknowledgement follows durability: no record counts as durable before its bytes are on disk.

Recorded at the system calls (``wal_support.DiskCalls``), in the order they return, beside every
``Acknowledgements.mark_durable``: each record acknowledged must have been written, all of
it, with ``RWF_DSYNC``, or written and then ``fdatasync``'d, before the acknowledgement that
covers its LSN. Both ways the log syncs: the flag where the file system takes it, and
``fdatasync`` after plain writes where it refuses the flag (as some do).

Before every write reaches the disk the writing thread lets the loop run whatever it was
handed until then (as a slow disk would), so an acknowledgement posted before its write
comes before the write in the record, whatever the threads' timing.

This fails if the write loses its ``RWF_DSYNC`` flag, if the ``fdatasync`` after plain writes
goes, or if the durable mark is handed to the loop before the write (each tried by hand).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from wal_support import DSYNC, Ack, DiskCall, DiskCalls, RecordingAcks, unsafe_acks

from durable_streams_server.storage.records import AppendHeader, Header, Record, encode
from durable_streams_server.storage.wal import WriteAheadLog
from durable_streams_server.storage.wal_writer import WalWriter


def _record(lsn: int) -> Record[Header]:
    return Record(lsn, 1, AppendHeader(lsn - 1, 0, None, None, False), (b"x" * (lsn % 7 * 40),))


def _let_the_loop_run(loop: asyncio.AbstractEventLoop, loop_thread: int) -> None:
    """On the writing thread: return once the loop has run everything handed to it so far."""
    if threading.get_ident() == loop_thread:
        return  # (a write on the loop's own thread: nothing else can run meanwhile)
    ran = threading.Event()
    loop.call_soon_threadsafe(ran.set)
    assert ran.wait(30), "the loop did not run"


def _appends(calls: DiskCalls, directory: Path) -> int:
    """Lone appends, batches, frames queued while a batch syncs, cuts between and inside
    batches, through a real writer; every waiter must be answered. The LSN of the last."""
    wal = WriteAheadLog(directory, preallocate_bytes=4096)  # (small steps: writes that grow the file too)

    async def main() -> int:
        loop, loop_thread = asyncio.get_running_loop(), threading.get_ident()
        calls.before_write = lambda: _let_the_loop_run(loop, loop_thread)
        acks = RecordingAcks(calls)
        writer = WalWriter(wal, acks, lambda error: None)
        writer.recovered(0)
        task = asyncio.create_task(writer.run())

        def queue(count: int) -> list[int]:
            lsns = [acks.stamp() for _ in range(count)]
            for lsn in lsns:
                writer.queue(lsn, encode(_record(lsn)))
            return lsns

        for count in (1, 1, 5, 1, 12, 2):
            await asyncio.gather(*(acks.wait(lsn) for lsn in queue(count)))
        waiting = []
        for count in (3, 1, 4, 1, 1, 6):  # (queued while earlier ones sync: pipelined batches)
            waiting += queue(count)
            await asyncio.sleep(0)
        writer.rotate_at(acks.next_lsn)
        waiting += queue(2)
        await asyncio.gather(*(acks.wait(lsn) for lsn in waiting))
        writer.rotate_at(acks.next_lsn)
        await asyncio.gather(*(acks.wait(lsn) for lsn in queue(3)))
        writer.close()
        await asyncio.wait_for(task, timeout=30)
        return acks.next_lsn - 1

    last = asyncio.run(main())
    wal.close()
    return last


def _acked(calls: DiskCalls) -> int:
    return max(event.lsn for event in calls.events if isinstance(event, Ack))


def test_with_rwf_dsync_every_acknowledged_record_was_written_with_the_flag_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "wal"
    calls = DiskCalls(directory).install(monkeypatch)
    last = _appends(calls, directory)
    assert unsafe_acks(calls.events, directory) == []
    assert _acked(calls) == last
    writes = [call for call in calls.calls if call.name in ("pwritev", "pwrite")]
    assert writes and all(call.name == "pwritev" and call.flags & DSYNC for call in writes)  # (this branch)


def test_where_the_flag_is_refused_every_acknowledged_record_was_fdatasynced_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "wal"
    calls = DiskCalls(directory, refuse_dsync=True).install(monkeypatch)
    last = _appends(calls, directory)
    assert unsafe_acks(calls.events, directory) == []
    assert _acked(calls) == last
    assert calls.refused == 1  # (asked once; plain writes from then on)
    writes = [call for call in calls.calls if call.name in ("pwritev", "pwrite")]
    assert writes and not any(call.flags & DSYNC for call in writes)  # (this branch)


def test_the_check_itself_finds_an_acknowledgement_ahead_of_its_sync(tmp_path: Path) -> None:
    """``unsafe_acks`` on records it is given: a plain write acknowledged before its
    ``fdatasync`` is reported, the same after it is not."""
    directory = tmp_path / "wal"
    wal = WriteAheadLog(directory)
    wal.start_segment(1)
    frame = encode(_record(1))
    wal.write([frame])
    wal.close()
    path = str(directory / f"{1:020d}.wal")
    write = DiskCall("pwrite", path, 0, "t", offset=0, length=len(frame))
    sync = DiskCall("fdatasync", path, 0, "t")
    assert unsafe_acks([write, Ack(1, 0), sync], directory) != []
    assert unsafe_acks([write, sync, Ack(1, 0)], directory) == []
    flagged = DiskCall("pwritev", path, 0, "t", offset=0, length=len(frame), flags=DSYNC)
    assert unsafe_acks([flagged, Ack(1, 0)], directory) == []
    short = DiskCall("pwritev", path, 0, "t", offset=0, length=len(frame) - 1, flags=DSYNC)
    assert unsafe_acks([short, Ack(1, 0)], directory) != []
