"""``history_rows.add_runs``: a stream's messages from a seq on, out of a decoded batch that may hold
other streams, other kinds of rows, gaps and any order, as contiguous runs in ``HISTORY_SCHEMA``;
the kinds tested unless the row group's statistics said every row is a message."""

from __future__ import annotations

import pyarrow as pa
import pytest

from durable_streams_server.storage.history_rows import HISTORY_SCHEMA, add_runs
from durable_streams_server.storage.table_schema import SCHEMA

_STRING = pa.string()


def _batch(rows: list[tuple[int, str | None, int]], *, kind_type: pa.DataType = _STRING) -> pa.RecordBatch:
    """Rows ``(stream_uid, kind, seq)`` with the table's types (``kind`` as ``kind_type``), each
    message's data naming its uid and seq."""
    fields = [SCHEMA.field(name) for name in ("stream_uid", "kind", "seq", "ts", "data", "meta")]
    fields[1] = pa.field("kind", kind_type, nullable=True)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([uid for uid, _, _ in rows], pa.int64()),
            pa.array([kind for _, kind, _ in rows], kind_type),
            pa.array([seq for _, _, seq in rows], pa.int64()),
            pa.array([1_000 + seq for _, _, seq in rows], SCHEMA.field("ts").type),
            pa.array([f"{uid}:{seq}".encode() for uid, _, seq in rows], SCHEMA.field("data").type),
            pa.array([None] * len(rows), SCHEMA.field("meta").type),
        ],
        schema=pa.schema(fields),
    )


def _runs(batch: pa.RecordBatch, uid: int, start: int, *, only_messages: bool) -> dict[int, list[bytes]]:
    runs: dict[int, pa.Table] = {}
    add_runs(runs, batch, uid, start, only_messages=only_messages)
    assert all(run.schema.equals(HISTORY_SCHEMA) for run in runs.values())
    assert all(run["seq"].to_pylist() == list(range(first, first + run.num_rows)) for first, run in runs.items())
    return {first: run["data"].to_pylist() for first, run in runs.items()}


@pytest.mark.parametrize("kind_type", [pa.string(), pa.string_view()], ids=["string", "string-view"])
def test_other_streams_other_kinds_earlier_seqs_and_gaps_are_left_out(kind_type: pa.DataType) -> None:
    batch = _batch(
        [
            *[(7, "message", 5), (7, "message", 3), (7, "message", 4), (8, "message", 6), (7, "state", 9)],
            *[(7, None, 10), (7, "message", 2), (7, "message", 8), (7, "message", 9)],
        ],
        kind_type=kind_type,
    )
    assert _runs(batch, 7, 3, only_messages=False) == {3: [b"7:3", b"7:4", b"7:5"], 8: [b"7:8", b"7:9"]}
    assert _runs(batch, 8, 0, only_messages=False) == {6: [b"8:6"]}
    assert _runs(batch, 9, 0, only_messages=False) == {}


def test_a_batch_of_the_streams_messages_only_is_kept_whole() -> None:
    batch = _batch([(7, "message", seq) for seq in range(4, 10)])
    for only_messages in (True, False):
        assert _runs(batch, 7, 4, only_messages=only_messages) == {4: [f"7:{seq}".encode() for seq in range(4, 10)]}
        assert _runs(batch, 7, 8, only_messages=only_messages) == {8: [b"7:8", b"7:9"]}


def test_kinds_are_not_tested_when_the_statistics_say_every_row_is_a_message() -> None:
    batch = _batch([(7, "message", 1), (7, "state", 2)])
    assert _runs(batch, 7, 0, only_messages=False) == {1: [b"7:1"]}
    assert _runs(batch, 7, 0, only_messages=True) == {1: [b"7:1", b"7:2"]}  # (what the statistics vouch for)
