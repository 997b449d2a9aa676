"""Direct history reads, planning: ask the server where a range is stored, cut it into partitions.

Our server answers a read plan (``Stream.read_plan``, the client's ``read_plans``) for a
stream and an offset range: the Delta table version, the data files and row groups holding
the range's messages for the stream's current incarnation (its fork ancestry's where
inherited), and ``delta_end``: below it the range is in those files, above it (not flushed
yet) it is read over HTTP as before.

``plan_stream`` turns a plan into partitions: ``DirectRange`` for ``[start, delta_end)``, cut
at the first message of each row group holding this stream only (so a backlog spreads over
whole row groups; such a row group is never split, since each task decodes the row groups
it reads) and elsewhere at most ``messagesPerPartition`` messages apart, then packed into
``ceil(messages / messagesPerPartition)`` partitions of about equal size (as Spark packs
file splits: few tasks of real work, not one per small row group), each listing the row
groups that can hold its messages; ``StreamRange`` (HTTP) for the rest. A
partition is defined by its sequence range, so whatever files a re-plan finds, it yields the
same rows. ``historyReads``: ``auto`` plans directly where the server offers plans (else HTTP),
``delta`` fails where it does not, ``http`` never asks.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from ..client import Client, PlannedFile, PlannedRowGroup, PlanSegment, PlansUnavailable, ReadPlan
from .offsets import is_seq_offset, starts_inside

__all__ = ["DirectRange", "FileSlice", "PlansUnavailable", "file_slice", "plan_stream"]


@dataclass(frozen=True)
class FileSlice:
    url: str
    """Absolute: a signed URL of the server's file endpoint, or a presigned object-store URL."""
    size: int
    row_groups: tuple[int, ...]
    local: str | None = None
    """The server's local path of the file: an executor that sees it (same machine or a shared
    filesystem) reads it there, the server then serves no bytes."""


def file_slice(file: PlannedFile, row_groups: tuple[int, ...]) -> FileSlice:
    return FileSlice(file.url, file.size, row_groups, file.local_path)


@dataclass(frozen=True)
class DirectRange(InputPartition):
    """Messages ``first <= seq < end`` of one stream, read from the files of a read plan."""

    key: str
    url: str
    """The stream's URL (a re-plan asks it again)."""
    uid: int
    """The incarnation whose rows hold these messages (a fork's source below its fork point)."""
    first: int
    end: int
    content_type: str
    incarnation: str
    files: tuple[FileSlice, ...]


def plan_stream(
    client: Client, key: str, url: str, start: str, end: str, messages_per_partition: int
) -> tuple[list[DirectRange], str]:
    """Direct partitions of ``[start, end)`` and where they stop (the rest is read over HTTP);
    ``PlansUnavailable`` where the server has no plan (``Gone`` propagates: the range is
    below the retained history)."""
    if not (is_seq_offset(start) and is_seq_offset(end)) or starts_inside(start) or starts_inside(end):
        raise PlansUnavailable("read plans cover whole messages between sequence offsets")
    plan = client.stream(url).read_plan(start, end=end)
    partitions: list[DirectRange] = []
    for segment in plan.segments:
        partitions += _cut(key, url, plan, segment, messages_per_partition)
    return partitions, plan.delta_end if partitions else start


def _cut(key: str, url: str, plan: ReadPlan, segment: PlanSegment, per_partition: int) -> list[DirectRange]:
    first, end, uid = segment.first_seq, segment.end_seq, segment.stream_uid
    pieces = [(file, group) for file in segment.files for group in file.row_groups]
    last_seqs = _clipped_last_seqs([group for _, group in pieces])
    covers = {
        g.first_seq: last + 1
        for (_, g), last in zip(pieces, last_seqs, strict=True)
        if g.exact and first <= g.first_seq < end
    }
    spans: list[tuple[int, int]] = []
    for lo, hi in itertools.pairwise(sorted({first, end} | set(covers))):
        # A row group is read whole: one of this stream only is never split (two tasks would
        # both decode it); a range of other row groups is split every ``per_partition``.
        whole = min(hi, covers.get(lo, lo))
        if whole > lo:
            spans.append((lo, whole))
        count = math.ceil((hi - whole) / per_partition)
        spans += [(whole + (hi - whole) * i // count, whole + (hi - whole) * (i + 1) // count) for i in range(count)]
    bounds = _balanced([hi for _, hi in spans[:-1]], first, end, per_partition)
    partitions = []
    for lo, hi in itertools.pairwise(bounds):
        chosen: dict[str, tuple[PlannedFile, list[int]]] = {}
        for (file, group), last in zip(pieces, last_seqs, strict=True):
            if group.first_seq < hi and last >= lo:
                chosen.setdefault(file.url, (file, []))[1].append(group.index)
        files = tuple(file_slice(file, tuple(indices)) for file, indices in chosen.values())
        partitions.append(DirectRange(key, url, uid, lo, hi, plan.content_type, plan.incarnation, files))
    return partitions


def _balanced(edges: list[int], first: int, end: int, per_partition: int) -> list[int]:
    """``ceil(messages / per_partition)`` partitions of about equal size, cut only at ``edges``
    (the ends of spans never split): each ideal cut moves to the nearest edge (the lower on a tie)."""
    count = math.ceil((end - first) / per_partition)
    edges = sorted(edges)
    cuts = set()
    for i in range(1, count if edges else 1):
        ideal = first + (end - first) * i / count
        above = bisect.bisect_left(edges, ideal)  # the nearest edges: edges[above - 1] < ideal <= edges[above]
        near = edges[max(0, above - 1) : above + 1]
        cuts.add(min(near, key=lambda edge: (abs(edge - ideal), edge)))
    return [first, *sorted(cuts), end]


def _clipped_last_seqs(groups: list[PlannedRowGroup]) -> list[int]:
    """Each row group's last possible message of the stream. A row group holding one stream
    only (``exact``) holds a contiguous run of its messages (a file is an LSN span, and
    compacted files are sorted by stream and seq), disjoint from every other such row group's,
    so its run ends before the next one's first message; its ``seq`` maximum may be a state
    row's (the tail) instead. Other row groups keep their statistics."""
    starts = sorted(group.first_seq for group in groups if group.exact)
    clipped = []
    for group in groups:
        last = group.last_seq
        if group.exact:
            later = bisect.bisect_right(starts, group.first_seq)  # the first start after it
            if later < len(starts):
                last = min(last, starts[later] - 1)
        clipped.append(last)
    return clipped
