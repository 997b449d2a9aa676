"""Which files one compaction pass rewrites, and together with which (pure, no I/O).

Every row of the table carries the LSN of the record (or flush, for ``state`` rows) that
wrote it, and every file's ``lsn`` statistics give the span ``[lo, hi]`` of its rows. The
flusher's files cover disjoint, increasing spans; a state checkpoint's file has the one
LSN of the flush it was taken at; a compacted file spans the files it replaced. Files
whose spans overlap form a *component*; components are disjoint and ordered by LSN.

A compaction *bin* is a run of consecutive small components whose bytes add up to about
``target_bytes``, rewritten as one file by one Delta commit that overwrites the rows
``lsn BETWEEN lo AND hi``. Because components are disjoint, that predicate matches the
rows of the bin's files and of no other file: the rewrite replaces exactly what it read.
A component holding a file of at least ``settled_bytes`` is settled and never rewritten by bin-packing
(it breaks runs), so a pass costs what was written since the last one (plus at most one
unsettled file per run, which the next pass merges with new data); a pass that finds no
bin of two or more files does nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True, slots=True)
class FileSpan:
    """One data file of the table: its path, size and the LSN span of its rows."""

    path: str
    size: int
    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class Bin:
    """Files to rewrite together; ``predicate`` matches exactly their rows."""

    files: tuple[FileSpan, ...]

    @property
    def lo(self) -> int:
        return min(file.lo for file in self.files)

    @property
    def hi(self) -> int:
        return max(file.hi for file in self.files)

    @property
    def size(self) -> int:
        return sum(file.size for file in self.files)

    @property
    def predicate(self) -> str:
        return f"lsn >= {self.lo} AND lsn <= {self.hi}"

    @property
    def paths(self) -> frozenset[str]:
        return frozenset(file.path for file in self.files)


def components(files: Iterable[FileSpan]) -> list[tuple[FileSpan, ...]]:
    """Files grouped by overlapping LSN spans, in LSN order."""
    groups: list[list[FileSpan]] = []
    hi = -1
    for file in sorted(files, key=lambda file: (file.lo, file.hi, file.path)):
        if groups and file.lo <= hi:
            groups[-1].append(file)
            hi = max(hi, file.hi)
        else:
            groups.append([file])
            hi = file.hi
    return [tuple(group) for group in groups]


def plan_bins(files: Sequence[FileSpan], target_bytes: int, settled_bytes: int) -> list[Bin]:
    """The bins of one pass, in LSN order (see the module docstring)."""
    bins: list[Bin] = []
    current: list[FileSpan] = []

    def close() -> None:
        if len(current) > 1:
            bins.append(Bin(tuple(current)))
        current.clear()

    for component in components(files):
        size = sum(file.size for file in component)
        if max(file.size for file in component) >= settled_bytes:
            close()  # settled: never rewritten, and no bin spans it
            continue
        if current and sum(file.size for file in current) + size > target_bytes:
            close()
        current.extend(component)
    close()
    return bins


def spans_intersecting(files: Iterable[FileSpan], lo: int, hi: int) -> frozenset[str]:
    """The paths of the files with rows in ``[lo, hi]`` (a bin's check before it commits)."""
    return frozenset(file.path for file in files if file.lo <= hi and file.hi >= lo)


def spans_of(actions: pa.Table) -> list[FileSpan]:
    """The spans of a table's data files, from its ``add`` actions (flattened: ``path``,
    ``size_bytes``, ``min.lsn``, ``max.lsn``)."""
    if actions.num_rows == 0:
        return []
    paths, sizes = actions["path"].to_pylist(), actions["size_bytes"].to_pylist()
    los, his = actions["min.lsn"].to_pylist(), actions["max.lsn"].to_pylist()
    if None in los or None in his:
        raise RuntimeError("a data file of the table has no lsn statistics; compaction needs them")
    return [FileSpan(*fields) for fields in zip(paths, sizes, los, his, strict=True)]
