"""The source's Spark offsets with incarnations: both per-stream forms load; re-creation rules."""

from __future__ import annotations

import pytest

from pyspark_durable_streams._source.incarnations import decode, encode, new_incarnation, range_start

A, B = "http://h/v1/stream/a", "http://h/v1/stream/b"
OLD = "0000000000001000_0000000000000000"
LOW = "0000000000000300_0000000000000000"


def test_checkpoints_without_incarnations_still_load_and_round_trip() -> None:
    written_before = {A: OLD, B: "-1"}
    assert decode(written_before) == ({A: OLD, B: "-1"}, {})
    assert encode(*decode(written_before)) == written_before
    mixed = {B: {"offset": LOW, "incarnation": "7-1"}, A: OLD}
    assert decode(mixed) == ({A: OLD, B: LOW}, {B: "7-1"})
    assert list(encode(*decode(mixed))) == [A, B]


def test_a_malformed_offset_names_the_stream() -> None:
    with pytest.raises(ValueError, match="stream 'http://h/v1/stream/a'"):
        decode({A: 5})


def test_new_incarnation_by_token_whatever_the_tail_and_by_tail_without_one() -> None:
    assert new_incarnation(OLD, "1-1", "9" * 16 + "_" + "0" * 16, "2-2") == "its incarnation changed from 1-1 to 2-2"
    assert new_incarnation(OLD, "1-1", LOW, "1-1") is None
    assert new_incarnation(OLD, None, LOW, None) == f"its tail {LOW} is below the offset {OLD} already read"
    assert new_incarnation(LOW, None, OLD, None) is None
    assert new_incarnation("-1", None, "0000000000000000_0000000000000000", None) is None


def test_a_batch_into_a_new_incarnation_reads_it_from_the_beginning() -> None:
    start = ({A: OLD}, {A: "1-1"})
    assert range_start(A, start, ({A: OLD}, {A: "1-1"})) == OLD
    assert range_start(A, start, ({A: "9" * 16 + "_" + "0" * 16}, {A: "2-2"})) == "-1"
    assert range_start(A, ({A: OLD}, {}), ({A: LOW}, {})) == "-1"
    assert range_start(B, start, ({B: LOW}, {B: "3-3"})) == "-1"
