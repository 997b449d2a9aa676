"""The source's offset arithmetic (``_offsets``): pure functions, no Spark, no server."""

from __future__ import annotations

import pytest

from pyspark_durable_streams._offsets import (
    EARLIEST,
    first_excluded,
    is_seq_offset,
    pending_messages,
    seq_of,
    seq_offset,
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
