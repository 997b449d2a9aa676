"""Bin planning (pure): which files a pass rewrites together, and that a bin's LSN predicate
matches exactly its own files."""

from __future__ import annotations

from durable_streams_server.storage.compaction_plan import FileSpan, components, plan_bins, spans_intersecting

MIB = 1 << 20


def _flushes(count: int, *, first_lsn: int = 1, size: int = MIB, prefix: str = "f") -> list[FileSpan]:
    """``count`` flush files of 10 LSNs each, consecutive."""
    return [
        FileSpan(f"{prefix}{index}", size, first_lsn + 10 * index, first_lsn + 10 * index + 9) for index in range(count)
    ]


def test_small_flush_files_are_cut_into_bins_of_the_target_size() -> None:
    bins = plan_bins(_flushes(10), target_bytes=4 * MIB, settled_bytes=2 * MIB)
    assert [[file.path for file in bin_.files] for bin_ in bins] == [
        ["f0", "f1", "f2", "f3"],
        ["f4", "f5", "f6", "f7"],
        ["f8", "f9"],
    ]
    assert (bins[0].lo, bins[0].hi, bins[0].size) == (1, 40, 4 * MIB)
    assert bins[0].predicate == "lsn >= 1 AND lsn <= 40"


def test_settled_files_are_never_rewritten_and_break_runs() -> None:
    settled = FileSpan("big", 64 * MIB, 1, 1000)
    big2 = FileSpan("big2", 64 * MIB, 1021, 2000)
    files = [settled, *_flushes(2, first_lsn=1001), big2, *_flushes(1, first_lsn=2001)]
    bins = plan_bins(files, target_bytes=128 * MIB, settled_bytes=64 * MIB)
    assert [[file.path for file in bin_.files] for bin_ in bins] == [["f0", "f1"]]  # a lone f0 after big2: no bin


def test_nothing_new_means_no_bin() -> None:
    compacted = [FileSpan("a", 100 * MIB, 1, 500), FileSpan("b", 30 * MIB, 501, 600)]
    assert plan_bins(compacted, target_bytes=128 * MIB, settled_bytes=64 * MIB) == []


def test_a_state_checkpoint_file_stays_with_the_flush_it_overlaps() -> None:
    flushes = _flushes(3)
    checkpoint = FileSpan("checkpoint", 10, 20, 20)  # taken at the LSN of the second flush
    assert components([*flushes, checkpoint]) == [(flushes[0],), (flushes[1], checkpoint), (flushes[2],)]
    bins = plan_bins([*flushes, checkpoint], target_bytes=int(1.5 * MIB), settled_bytes=MIB * 100)
    assert [sorted(file.path for file in bin_.files) for bin_ in bins] == [["checkpoint", "f1"]]


def test_a_bin_predicate_matches_only_its_own_files() -> None:
    settled = FileSpan("old", 200 * MIB, 1, 100)
    files = [settled, *_flushes(20, first_lsn=101), FileSpan("checkpoint", 5, 150, 150)]
    for bin_ in plan_bins(files, target_bytes=5 * MIB, settled_bytes=64 * MIB):
        assert spans_intersecting(files, bin_.lo, bin_.hi) == bin_.paths
