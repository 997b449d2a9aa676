"""How a read plan becomes partitions: pure functions, no server."""

from __future__ import annotations

import itertools

from pyspark_durable_streams._source.direct_plans import _cut
from pyspark_durable_streams.client import PlannedFile, PlannedRowGroup, PlanSegment, ReadPlan

PLAN = ReadPlan("k", "7-1", "application/json", "-1", "-1", "-1", 1, 0, ())


def _group(index: int, first: int, last: int, exact: bool = True) -> PlannedRowGroup:
    return PlannedRowGroup(index, first, last, last - first + 1, exact)


def _segment(first: int, end: int, *files: tuple[str, list[PlannedRowGroup]]) -> PlanSegment:
    listed = tuple(PlannedFile(url, 10, tuple(groups), url) for url, groups in files)
    return PlanSegment(7, first, end, listed)


def _parts(segment: PlanSegment, per: int) -> list[tuple[int, int, list[tuple[str, tuple[int, ...]]]]]:
    return [(p.first, p.end, [(f.url, f.row_groups) for f in p.files]) for p in _cut("k", "u", PLAN, segment, per)]


def test_a_row_group_of_the_stream_is_one_partition_and_never_split() -> None:
    # each exact row group's seq maximum is the next one's first message (a state row's tail)
    segment = _segment(0, 900, ("a", [_group(0, 0, 300), _group(1, 300, 600)]), ("b", [_group(0, 600, 900)]))
    assert _parts(segment, 100) == [(0, 300, [("a", (0,))]), (300, 600, [("a", (1,))]), (600, 900, [("b", (0,))])]


def test_adjacent_small_row_groups_share_a_partition() -> None:
    groups = [_group(i, i * 10, i * 10 + 10) for i in range(10)]
    parts = _parts(_segment(0, 100, ("a", groups)), 50)
    assert [(lo, hi) for lo, hi, _ in parts] == [(0, 50), (50, 100)]
    assert parts[0][2] == [("a", (0, 1, 2, 3, 4))]


def test_row_groups_of_many_streams_are_split_by_messages_and_read_by_each() -> None:
    segment = _segment(0, 250, ("mixed", [_group(0, 0, 10_000, exact=False)]))
    parts = _parts(segment, 100)
    assert [(lo, hi) for lo, hi, _ in parts] == [(0, 83), (83, 166), (166, 250)]
    assert all(files == [("mixed", (0,))] for _, _, files in parts)


def test_partitions_cover_the_range_exactly_once() -> None:
    segment = _segment(
        5,
        1000,
        ("a", [_group(0, 0, 120), _group(1, 120, 400, exact=False)]),
        ("b", [_group(0, 400, 700), _group(1, 700, 2000)]),
    )
    parts = _parts(segment, 150)
    edges = [(lo, hi) for lo, hi, _ in parts]
    assert edges[0][0] == 5 and edges[-1][1] == 1000
    assert all(a[1] == b[0] for a, b in itertools.pairwise(edges))
    for lo, hi, files in parts:  # every row group that can hold a message of the partition is listed
        for url, groups in (("a", [(0, 0, 119), (1, 120, 400)]), ("b", [(0, 400, 699), (1, 700, 2000)])):
            for index, first, last in groups:
                if first < hi and last >= lo:
                    assert any(u == url and index in listed for u, listed in files)
