"""The WAL's running byte count (the WAL size cap reads it on every write) matches the disk."""

from __future__ import annotations

from pathlib import Path

from wal_support import records_on_disk

from durable_streams_server.storage.records import AppendHeader, Record, encode
from durable_streams_server.storage.wal import PREALLOCATE_BYTES, WriteAheadLog


def frame(lsn: int, size: int = 100) -> bytes:
    return encode(Record(lsn, 1, AppendHeader(lsn, 0, None, None, False), (b"x" * size,)))


def on_disk(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.glob("*.wal"))


def test_count_follows_writes_rotation_and_drops(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    assert wal.size_bytes() == 0
    wal.start_segment(1)
    wal.write([frame(1), frame(2, 5000)])
    wal.start_segment(3)
    wal.write([frame(3)])
    wal.start_segment(4)
    wal.write([frame(4, 70_000)])
    closed = sum(len(frame(n)) for n in (1, 3)) + len(frame(2, 5000))
    assert wal.size_bytes() == records_on_disk(tmp_path) == closed + len(frame(4, 70_000))
    # The segment being written is preallocated beyond its records (closed ones are cut to theirs).
    assert on_disk(tmp_path) == closed + PREALLOCATE_BYTES
    assert wal.drop_through(2) == 1
    assert wal.size_bytes() == records_on_disk(tmp_path)
    assert wal.drop_through(10) == 1  # the segment being written stays
    assert wal.size_bytes() == records_on_disk(tmp_path) == len(frame(4, 70_000))
    wal.close()  # cut to its records
    assert wal.size_bytes() == on_disk(tmp_path) == len(frame(4, 70_000))


def test_the_count_grows_with_every_write_and_never_with_preallocation(tmp_path: Path) -> None:
    """The WAL cap reads the count: it must not move when a segment is preallocated or cut."""
    wal = WriteAheadLog(tmp_path, preallocate_bytes=1000)
    wal.start_segment(1)
    counts = []
    for lsn in range(1, 13):  # past the 1000 B step, more than once
        wal.write([frame(lsn)])
        counts.append(wal.size_bytes())
        assert wal.size_bytes() == records_on_disk(tmp_path) <= on_disk(tmp_path)
    assert counts == [sum(len(frame(n)) for n in range(1, lsn + 1)) for lsn in range(1, 13)]
    assert on_disk(tmp_path) > counts[-1]  # (preallocated)
    wal.start_segment(13)  # a rotation cuts the closed segment: the count does not move
    assert wal.size_bytes() == counts[-1] == on_disk(tmp_path)
    wal.close()


def test_count_of_a_reopened_log_includes_old_segments_and_cut_torn_tails(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    wal.start_segment(1)
    wal.write([frame(1), frame(2)])
    wal.start_segment(3)
    wal.write([frame(3), frame(4)[:-7]])  # torn by a crash
    wal.close()

    reopened = WriteAheadLog(tmp_path)
    assert reopened.size_bytes() == on_disk(tmp_path)
    assert [record.lsn for record in reopened.replay()] == [1, 2, 3]
    assert reopened.size_bytes() == on_disk(tmp_path) == sum(len(frame(n)) for n in (1, 2, 3))
    reopened.start_segment(4)  # the recovered server appends to the truncated segment's successor
    reopened.write([frame(4)])
    reopened.start_segment(3)  # reopening a non-empty segment counts what it holds once
    assert reopened.size_bytes() == on_disk(tmp_path) == sum(len(frame(n)) for n in (1, 2, 3, 4))
    reopened.close()
