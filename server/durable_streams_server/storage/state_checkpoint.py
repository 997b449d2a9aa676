"""State checkpoints: recovery reads one row per live stream, whatever the number of flushes.

Every flush commits one ``state`` row for each stream its records touched (and one
``subscription`` row per subscription), so the rows of a busy stream pile up one per
flush. A *state checkpoint* is a commit that appends the newest ``state`` and
``subscription`` row of every uid, re-stamped with the LSN ``C`` the table covered when the
checkpoint was read, and records ``C`` as the application transaction
``CHECKPOINT_APP_ID``. Recovery then reads only the rows with ``lsn >= C``: the checkpoint's
rows and those of the flushes after it; the files of older flushes are skipped by their
``lsn`` statistics without being opened. The newest row per uid (highest LSN) wins; a tie
at ``C`` is the same state twice. Tombstones (deleted streams not yet purged) stay in the
checkpoint: they are the durable intention compaction resumes after a restart.

The checkpoint is derived from the table alone (the previous checkpoint plus the rows
after it), off the event loop; flushes that commit meanwhile have LSNs above ``C`` and so
win over it. Rows a checkpoint supersedes are dropped when compaction rewrites their files
(``compaction``). ``CheckpointPolicy`` decides when one is due: after enough commits
that their rows are worth folding (the number of files recovery opens stays bounded), and
never so often that rewriting every live stream's row costs more than the rows it folds.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .state_files import StateFiles
from .table_schema import SCHEMA

CHECKPOINT_APP_ID = "durable-streams-server/state-checkpoint"
BATCH_ROWS = 16_384
"""Rows a checkpoint decodes at a time, and the row groups it writes."""
_KEYS = ["kind", "stream_uid", "lsn"]
_WINNER_COLUMNS = ["kind", "stream_uid", "lsn", "file", "at"]


class Checkpoint:
    """The rows of a state checkpoint over ``files``, re-stamped ``covered``, in two passes: the
    keys of every row first (``kept``: which row of which file is the newest of its
    ``(kind, stream_uid)``), then the rows kept, file by file, a batch at a time
    (``rows_to_write``), as the Delta writer takes them. A checkpoint of 850,000 streams (a
    local table, 1,000,000 rows folded) peaks at +219-268 MiB of RSS so; holding every row
    folded, decoded and then taken, it peaked at +797-800 MiB."""

    def __init__(self, files: StateFiles, covered: int) -> None:
        self.files = files
        self.covered = covered
        self.kept = self._winners()
        """Per file (its index in ``files.files``), the sorted positions of its rows kept."""
        self.rows = sum(len(positions) for positions in self.kept.values())

    def _winners(self) -> dict[int, np.ndarray]:
        """(Arrow arrays, a few bytes a row, allocated from Arrow's pool: freed, they go back
        to the system at once, where numpy's may stay in glibc's heap.)"""
        pieces = []
        codes = pa.array(list(self.files.kinds))  # (a kind as its index: rows asked for have one)
        for file, position, batch in self.files.batches(_KEYS, BATCH_ROWS):
            mask = pc.fill_null(self.files.matching(batch), False)
            rows = batch.filter(mask)
            if rows.num_rows:
                kinds = pc.index_in(rows["kind"], value_set=codes)
                files = pa.repeat(pa.scalar(file, pa.int64()), rows.num_rows)
                at = pc.add(pc.indices_nonzero(mask).cast(pa.int64()), position)
                columns = [kinds, rows["stream_uid"], rows["lsn"], files, at]
                pieces.append(pa.record_batch(columns, names=_WINNER_COLUMNS))
        if not pieces:
            return {}
        newest = newest_per_uid(pa.Table.from_batches(pieces)).select(["file", "at"]).combine_chunks()
        newest = newest.take(pc.sort_indices(newest, [("file", "ascending"), ("at", "ascending")]))
        files, positions = newest["file"].to_numpy(), newest["at"].to_numpy()
        starts = np.flatnonzero(np.r_[True, files[1:] != files[:-1]])
        return {int(files[s]): part for s, part in zip(starts, np.split(positions, starts[1:]), strict=True)}

    def rows_to_write(self) -> pa.RecordBatchReader | pa.Table:
        """A local table's rows as a reader, read as the writer takes them; an object store's
        read now, whole (only the rows kept): the writer pulls a reader from delta-rs's own
        runtime, from which the files of an object store cannot be read (a panic)."""
        if self.files.root is not None:
            return pa.RecordBatchReader.from_batches(SCHEMA, self._batches())
        return pa.Table.from_batches(list(self._batches()), SCHEMA)

    def _batches(self) -> Iterator[pa.RecordBatch]:
        lsn = SCHEMA.get_field_index("lsn")
        for file, position, batch in self.files.batches(SCHEMA.names, BATCH_ROWS, only=self.kept):
            kept = self.kept[file]
            lo, hi = np.searchsorted(kept, [position, position + batch.num_rows])
            if lo < hi:
                rows = batch.take(pa.array(kept[lo:hi] - position))
                stamps = pa.repeat(pa.scalar(self.covered, SCHEMA.field("lsn").type), rows.num_rows)
                yield rows.set_column(lsn, SCHEMA.field("lsn"), stamps)


def newest_per_uid(rows: pa.Table) -> pa.Table:
    """For each ``(kind, stream_uid)``, its row with the highest ``lsn``, in ``(kind, stream_uid)``
    order. The keys are sorted, not the rows: the rows kept are copied once (sorting the whole
    table, then filtering it, copied every row's ``meta`` twice: ~330 MiB at peak for a
    million rows of ~130 bytes each, ~205 MiB so)."""
    if rows.num_rows == 0:
        return rows
    keys = pa.table([rows["kind"], rows["stream_uid"], rows["lsn"]], names=["kind", "stream_uid", "lsn"])
    order = pc.sort_indices(keys, [("kind", "ascending"), ("stream_uid", "ascending"), ("lsn", "descending")])
    uids = rows["stream_uid"].take(order).to_numpy()
    kinds = pc.dictionary_encode(rows["kind"].take(order)).combine_chunks().indices.to_numpy(zero_copy_only=False)
    first = np.ones(len(uids), dtype=bool)
    first[1:] = (uids[1:] != uids[:-1]) | (kinds[1:] != kinds[:-1])
    return rows.take(order.filter(pa.array(first)))


@dataclass
class CheckpointPolicy:
    """When a state checkpoint is due (see the module docstring)."""

    min_commits: int = 20
    """Commits since the last checkpoint before one is considered. Recovery opens a file per
    commit since the checkpoint, one at a time (one GET each on an object store for a small
    flush file: ``state_files``), and a shard's new owner serves nothing until it has: a
    checkpoint commit every 20 flushes where the rows are few (the ratio below keeps large
    ones rare) bounds that read to a few hundred ms on moto."""
    max_commits: int = 1000
    """Commits after which one is taken whatever it costs."""
    commits: int = 0
    rows: int = 0
    checkpoint_rows: int = 0
    """Rows of the last checkpoint (one per live uid then)."""

    def note_commit(self, rows: int) -> None:
        self.commits += 1
        self.rows += rows

    def due(self) -> bool:
        if self.commits >= self.max_commits:
            return True
        return self.commits >= self.min_commits and 4 * self.rows >= self.checkpoint_rows

    def taken(self, rows: int, commits_since: int = 0, rows_since: int = 0) -> None:
        """A checkpoint of ``rows`` rows was written (or found at recovery, with the
        commits and rows after it)."""
        if rows:  # (0: nothing was new since the last one, whose size still stands)
            self.checkpoint_rows = rows
        self.commits, self.rows = commits_since, rows_since
