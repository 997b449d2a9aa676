"""The source's offset arithmetic (``_offsets``): pure functions, no Spark, no server."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from pyspark_durable_streams._source.offsets import (
    EARLIEST,
    first_excluded,
    is_seq_offset,
    pending_messages,
    seq_of,
    seq_offset,
    seq_offsets,
    split_range,
    starts_inside,
)

INSIDE_7 = "0000000000000007_0000000000000042"  # byte 42 of message 7


def test_the_sentinel_and_sequence_offsets() -> None:
    assert EARLIEST == "-1" and is_seq_offset(EARLIEST) and seq_of(EARLIEST) == 0
    assert seq_offset(7) == "0000000000000007_0000000000000000" and seq_of(INSIDE_7) == 7
    assert not is_seq_offset("abc") and not is_seq_offset("now")
    with pytest.raises(ValueError, match="not a sequence offset"):
        seq_of("0000000000000007")


def test_offsets_of_a_column_of_sequence_numbers() -> None:
    seqs = [0, 7, 9_999, 10_000, 99_999_999, 100_000_000, 123_456_789_012, 10**16 - 1]
    expected = [seq_offset(seq) for seq in seqs]
    assert seq_offsets(pa.array(seqs, pa.int64())).to_pylist() == expected
    chunked = pa.chunked_array([pa.array(seqs[:3], pa.int64()), pa.array(seqs[3:], pa.int64())])
    built = seq_offsets(chunked)
    assert built.type == pa.string() and built.to_pylist() == expected
    assert seq_offsets(pa.array(seqs, pa.int64()).slice(2, 3)).to_pylist() == expected[2:5]
    assert seq_offsets(pa.array([], pa.int64())).to_pylist() == []
    for bad in ([-1], [10**16]):
        with pytest.raises(ValueError, match="16 decimal digits"):
            seq_offsets(pa.array(bad, pa.int64()))


def test_offsets_of_consecutive_sequence_numbers() -> None:
    # (a run of consecutive numbers is copied from a template: across its 10,000-message blocks,
    # at the first and last numbers there are, and for counts past what was made before)
    for first, count in ((0, 1), (0, 10_000), (9_999, 2), (5_000, 8_192), (123_456, 25_000), (10**16 - 3, 3)):
        seqs = np.arange(first, first + count, dtype=np.int64)
        built = seq_offsets(pa.array(seqs))
        assert built.to_pylist() == [seq_offset(int(seq)) for seq in seqs]
        built.validate(full=True)
    assert seq_offsets(pa.array([4, 5, 7], pa.int64())).to_pylist() == [seq_offset(seq) for seq in (4, 5, 7)]
    assert seq_offsets(pa.array([5, 4], pa.int64())).to_pylist() == [seq_offset(5), seq_offset(4)]
    with pytest.raises(ValueError, match="16 decimal digits"):
        seq_offsets(pa.array([10**16 - 1, 10**16], pa.int64()))


def test_starts_inside_a_message() -> None:
    assert starts_inside(INSIDE_7)
    assert not starts_inside(seq_offset(7))
    assert not starts_inside(EARLIEST) and not starts_inside("other-server-offset")


def test_a_message_read_up_to_an_offset_is_behind_it() -> None:
    assert pending_messages(seq_offset(7), seq_offset(10)) == 3
    assert pending_messages(INSIDE_7, seq_offset(10)) == 2  # message 7 was read up to byte 42
    assert pending_messages(EARLIEST, seq_offset(10)) == 10
    assert pending_messages(seq_offset(10), seq_offset(7)) == 0
    assert first_excluded(seq_offset(10)) == 10
    assert first_excluded("0000000000000010_0000000000000001") == 11  # message 10 starts before it
    with pytest.raises(ValueError, match="not a sequence offset"):
        first_excluded(EARLIEST)


def test_split_range_cuts_at_message_boundaries() -> None:
    assert split_range(EARLIEST, seq_offset(10), 3) == [
        (EARLIEST, seq_offset(3)),
        (seq_offset(3), seq_offset(6)),
        (seq_offset(6), seq_offset(10)),
    ]
    assert split_range(INSIDE_7, seq_offset(8), 4) == [(INSIDE_7, seq_offset(8))]
