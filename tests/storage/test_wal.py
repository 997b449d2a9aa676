"""The segmented write-ahead log on a real directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_streams_server.storage.records import AppendHeader, Header, Record, encode
from durable_streams_server.storage.wal import PREALLOCATE_BYTES, WriteAheadLog


def rec(lsn: int, *messages: bytes) -> Record[Header]:
    return Record(lsn, lsn % 3, AppendHeader(lsn, 0, None, None, False), tuple(messages))


def segment_starts(directory: Path) -> list[int]:
    return sorted(int(p.stem) for p in directory.glob("*.wal"))


def write_segments(wal: WriteAheadLog, bounds: list[tuple[int, int]]) -> list[Record[Header]]:
    """One segment per ``(first, last)`` LSN range, each written in two batches."""
    written = []
    for first, last in bounds:
        wal.start_segment(first)
        records = [rec(lsn, f"m{lsn}".encode(), b"") for lsn in range(first, last + 1)]
        half = len(records) // 2
        wal.write([encode(r) for r in records[:half]])
        wal.write([encode(r) for r in records[half:]])
        written += records
    return written


@pytest.fixture
def wal_dir(tmp_path: Path) -> Path:
    return tmp_path / "wal"


def test_write_and_replay_in_order_across_segments(wal_dir: Path) -> None:
    wal = WriteAheadLog(wal_dir)
    written = write_segments(wal, [(1, 4), (5, 5), (6, 20), (21, 22)])
    wal.close()
    assert segment_starts(wal_dir) == [1, 5, 6, 21]
    assert (wal_dir / "00000000000000000001.wal").is_file()
    assert list(WriteAheadLog(wal_dir).replay()) == written


def test_replay_orders_segments_by_first_lsn_not_creation(wal_dir: Path) -> None:
    wal = WriteAheadLog(wal_dir)
    late = write_segments(wal, [(100, 101)])
    early = write_segments(wal, [(2, 3), (9, 9)])
    wal.close()
    assert [r.lsn for r in WriteAheadLog(wal_dir).replay()] == [2, 3, 9, 100, 101]
    assert list(WriteAheadLog(wal_dir).replay()) == [*early, *late]


def test_replay_ignores_foreign_files(wal_dir: Path) -> None:
    wal = WriteAheadLog(wal_dir)
    written = write_segments(wal, [(1, 3)])
    wal.close()
    (wal_dir / "notes.txt").write_bytes(b"garbage")
    (wal_dir / "abc.wal").write_bytes(b"garbage")
    assert list(WriteAheadLog(wal_dir).replay()) == written
    assert (wal_dir / "abc.wal").read_bytes() == b"garbage"


def test_empty_log_replays_nothing(wal_dir: Path) -> None:
    assert list(WriteAheadLog(wal_dir).replay()) == []
    assert wal_dir.is_dir()


def test_size_bytes_counts_all_segments(wal_dir: Path) -> None:
    wal = WriteAheadLog(wal_dir)
    written = write_segments(wal, [(1, 2), (3, 4)])
    wal.close()
    assert wal.size_bytes() == sum(len(encode(r)) for r in written)


def test_a_crash_leaves_the_preallocated_zeros_which_replay_cuts_off(wal_dir: Path) -> None:
    wal = WriteAheadLog(wal_dir)
    written = write_segments(wal, [(1, 3), (4, 6)])
    current = wal_dir / f"{4:020d}.wal"
    frames = sum(len(encode(r)) for r in written[3:])
    assert current.stat().st_size == PREALLOCATE_BYTES > frames  # not closed: as a kill -9 leaves it
    assert current.read_bytes()[frames:] == bytes(PREALLOCATE_BYTES - frames)

    reopened = WriteAheadLog(wal_dir)
    assert list(reopened.replay()) == written
    assert current.stat().st_size == frames
    reopened.start_segment(7)
    reopened.write([encode(rec(7, b"after the crash"))])
    reopened.close()
    wal.close()  # (the crashed writer's descriptor: it wrote nothing since)
    assert list(WriteAheadLog(wal_dir).replay()) == [*written, rec(7, b"after the crash")]


@pytest.mark.parametrize("cut", [1, 7, 8, 20, -1])
def test_torn_tail_is_truncated_and_later_appends_are_intact(wal_dir: Path, cut: int) -> None:
    wal = WriteAheadLog(wal_dir)
    written = write_segments(wal, [(1, 3), (4, 6)])
    torn = encode(rec(7, b"never acknowledged"))
    wal.write([torn[:cut]])
    wal.close()
    last_segment = wal_dir / f"{4:020d}.wal"
    intact_size = sum(len(encode(r)) for r in written[3:])
    assert last_segment.stat().st_size == intact_size + len(torn[:cut])

    reopened = WriteAheadLog(wal_dir)
    assert list(reopened.replay()) == written
    assert last_segment.stat().st_size == intact_size
    # Appending to the same (truncated) segment, as after a restart without rotation.
    reopened.start_segment(4)
    more = [rec(7, b"seven"), rec(8, b"eight")]
    reopened.write([encode(r) for r in more])
    reopened.start_segment(9)
    reopened.write([encode(rec(9))])
    reopened.close()
    assert list(WriteAheadLog(wal_dir).replay()) == [*written, *more, rec(9)]


def test_torn_tail_in_earlier_segment_does_not_hide_later_segments(wal_dir: Path) -> None:
    wal = WriteAheadLog(wal_dir)
    first = write_segments(wal, [(1, 2)])
    wal.write([encode(rec(3))[:-1]])
    second = write_segments(wal, [(3, 4)])
    wal.close()
    assert list(WriteAheadLog(wal_dir).replay()) == [*first, *second]
    assert (wal_dir / f"{1:020d}.wal").stat().st_size == sum(len(encode(r)) for r in first)


@pytest.mark.parametrize(
    ("lsn", "remaining"),
    [
        (0, [1, 5, 10, 20]),
        (3, [1, 5, 10, 20]),
        (4, [5, 10, 20]),
        (8, [5, 10, 20]),
        (9, [10, 20]),
        (19, [20]),
        (25, [20]),
        (10**9, [20]),
    ],
)
def test_drop_through_deletes_only_closed_segments_wholly_covered(
    wal_dir: Path, lsn: int, remaining: list[int]
) -> None:
    wal = WriteAheadLog(wal_dir)
    written = write_segments(wal, [(1, 4), (5, 9), (10, 19), (20, 24)])
    dropped = wal.drop_through(lsn)
    assert dropped == 4 - len(remaining)
    assert segment_starts(wal_dir) == remaining
    # The current segment still takes writes, and what is left replays from its first record.
    wal.write([encode(rec(25))])
    wal.close()
    assert list(WriteAheadLog(wal_dir).replay()) == [r for r in written if r.lsn >= remaining[0]] + [rec(25)]


def test_drop_through_never_deletes_current_segment(wal_dir: Path) -> None:
    wal = WriteAheadLog(wal_dir)
    write_segments(wal, [(1, 4), (5, 9), (10, 14)])
    wal.start_segment(5)  # current segment is not the newest file
    assert wal.drop_through(10**9) == 1
    assert segment_starts(wal_dir) == [5, 10]
    wal.close()


def test_drop_through_on_reopened_log_keeps_last_segment(wal_dir: Path) -> None:
    wal = WriteAheadLog(wal_dir)
    write_segments(wal, [(1, 4), (5, 9)])
    wal.close()
    reopened = WriteAheadLog(wal_dir)
    assert reopened.drop_through(10**9) == 1
    assert segment_starts(wal_dir) == [5]
    assert reopened.drop_through(10**9) == 0


def test_without_synced_writes_a_batch_is_written_then_synced(tmp_path: Path) -> None:
    """Where ``RWF_DSYNC`` is refused the log falls back to ``pwrite`` + ``fdatasync``: the
    same frames on disk either way."""
    logs = {}
    for synced in (True, False):
        wal = WriteAheadLog(tmp_path / str(synced))
        wal._dsync_write = synced  # (as after the file system refused the flag)
        wal.start_segment(1)
        wal.write([encode(rec(lsn, b"m")) for lsn in (1, 2)])
        wal.write([encode(rec(3, b"m"))])
        wal.close()
        logs[synced] = [record.lsn for record in WriteAheadLog(tmp_path / str(synced)).replay()]
    assert logs == {True: [1, 2, 3], False: [1, 2, 3]}
