"""Time lookups in a real Delta table (``ReadPlanner.first_at`` over ``storage.time_index``):
the first message of a stream appended at or after a time, exact, found by reading one row
group (the Delta log's and the footers' ``ts`` statistics leave the others out), and none read
for a time after every message."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import WriterProperties, write_deltalake

from durable_streams_server.storage.read_plans import ReadPlanner
from durable_streams_server.storage.table_schema import SCHEMA

FILES, ROWS, GROUP = 4, 40, 10
BASE_US = 1_700_000_000_000_000


def _ts(uid: int, seq: int) -> int:
    """Stream 1's message ``seq`` was appended at BASE + seq ms, stream 2's a second later."""
    return BASE_US + (seq + (1000 if uid == 2 else 0)) * 1000


def _rows(first: int, interleaved: bool = False) -> pa.Table:
    """Both streams' messages ``first…``: by stream, then seq (as flushes and compaction
    write them), or interleaved (row groups shared by the two)."""
    seqs = range(first, first + ROWS // 2)
    rows = [(uid, seq) for seq in seqs for uid in (1, 2)] if interleaved else [(u, s) for u in (1, 2) for s in seqs]
    return pa.table(
        {
            "stream": [f"s{uid}" for uid, _ in rows],
            "stream_uid": [uid for uid, _ in rows],
            "kind": ["message"] * len(rows),
            "seq": [seq for _, seq in rows],
            "ts": pa.array([_ts(uid, seq) for uid, seq in rows], pa.timestamp("us", tz="UTC")),
            "data": [b"x"] * len(rows),
            "meta": pa.nulls(len(rows), pa.string()),
            "lsn": list(range(len(rows))),
        },
        schema=SCHEMA,
    )


def _planner(tmp_path: Path, interleaved: bool) -> tuple[ReadPlanner, list[tuple[str, int]]]:
    """Four data files of two streams' messages, in row groups of 10 rows; the planner's
    row-group reads are recorded (it still reads the real file)."""
    uri = str(tmp_path / "table")
    properties = WriterProperties(max_row_group_size=GROUP)
    for index in range(FILES):
        write_deltalake(uri, _rows(index * ROWS // 2, interleaved), mode="append", writer_properties=properties)
    found = ReadPlanner(uri, {}, ttl_s=60)
    reads: list[tuple[str, int]] = []
    real = found._read_group

    def recorded(path: str, index: int) -> pa.Table:
        reads.append((path, index))
        return real(path, index)

    found._read_group = recorded  # type: ignore[method-assign]
    return found, reads


@pytest.fixture
def planner(tmp_path: Path) -> tuple[ReadPlanner, list[tuple[str, int]]]:
    return _planner(tmp_path, interleaved=False)


def test_the_first_message_at_or_after_a_time_from_one_row_group(
    planner: tuple[ReadPlanner, list[tuple[str, int]]],
) -> None:
    found, reads = planner
    end = FILES * ROWS // 2
    for seq in (0, 7, 23, 45, 79):
        for at, expected in ((_ts(1, seq), seq), (_ts(1, seq) - 500, seq), (_ts(1, seq) + 1, seq + 1)):
            reads.clear()
            answer = found.first_at([(1, 0, end)], at)
            assert answer == (expected if expected < end else None), (seq, at)
            assert len(reads) <= 1, reads  # one row group read at most, whichever file holds it
    reads.clear()
    assert found.first_at([(1, 0, end)], _ts(1, end - 1) + 1) is None  # after every message of stream 1
    assert reads == []  # the statistics alone say so
    # Stream 2 (a second later) from its own rows; a segment's range bounds the answer.
    assert found.first_at([(2, 0, end)], _ts(1, 0)) == 0
    assert found.first_at([(1, 30, end)], _ts(1, 3)) == 30
    assert found.first_at([(1, 0, 10), (1, 50, end)], _ts(1, 20)) == 50


def test_row_groups_shared_by_streams_still_give_the_exact_answer(tmp_path: Path) -> None:
    found, _ = _planner(tmp_path, interleaved=True)
    end = FILES * ROWS // 2
    for seq in range(0, end, 3):
        assert found.first_at([(1, 0, end)], _ts(1, seq)) == seq
        assert found.first_at([(2, 0, end)], _ts(2, seq) - 1) == seq
    assert found.first_at([(2, 0, end)], _ts(2, end - 1) + 1) is None
