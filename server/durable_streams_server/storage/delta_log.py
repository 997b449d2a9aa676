"""The Delta tier: one Delta table holding every stream's messages and state.

Schema (one table, ``<storage-uri>/streams``; documented in the README):

============  ==================  ===========================================================
column        type                meaning
============  ==================  ===========================================================
stream        string              the stream's path, e.g. ``v1/stream/orders``
stream_uid    int64               the stream's incarnation (a re-created path gets a new one)
kind          string              ``message``, ``state``, ``snapshot`` or ``subscription``
seq           int64               message: its sequence number; state: the stream's tail;
                                  snapshot: the offset (sequence number) it was taken at
ts            timestamp[us, UTC]  when the message was appended / the state was written
data          binary              the message bytes / the snapshot blob / state: one byte of
                                  flags (``state_rows``: parsed at recovery or left dormant)
meta          string              state: the stream's (or bucket's) state as JSON;
                                  snapshot: its content type; message: batch length;
                                  subscription: its state as JSON (null: deleted)
lsn           int64               WAL position of the record that wrote the row
============  ==================  ===========================================================

A commit holds a batch of records' messages plus one ``state`` row per stream those
records touched, so data and the state it changes land in one atomic Delta commit.
Recovery reads the newest ``state`` row per uid from the last state checkpoint on
(``state_checkpoint``); compaction drops the rows it supersedes. Each
commit also records the highest LSN it covers as a Delta application transaction
(``txn`` action, app id ``durable-streams-server``): recovery replays exactly the WAL
records after it, and a flush retried after a crash is recognised and skipped.

Subscriptions (and the webhook signing keys) are ``subscription`` rows: the state their
newest record in the commit carries, ``stream`` their reserved name
(``<root>__ds/subscriptions/<id>``, ``__ds/signing-keys``), ``stream_uid`` their uid
(0 for the keys), ``seq`` 0. Recovery takes the newest row per uid
(``load_subscriptions``).

History reads go through ``history_reader``. All methods block; callers run them on worker
threads.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import ColumnProperties, CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake
from deltalake.exceptions import TableNotFoundError

from .commit_rows import clustered, commit_table
from .compaction_plan import Bin, FileSpan, spans_intersecting, spans_of
from .local_sync import LocalSync
from .log_trim import table_properties, trim_due, trim_log
from .owner_log import check_owner, claim_table, epoch_of, fenced_by, handover_asked, name_owner, owner_properties
from .ownership import OWNER_KEY, Node, Owner, released
from .records import (
    Header,
    Record,
)
from .state_checkpoint import BATCH_ROWS, CHECKPOINT_APP_ID, Checkpoint, newest_per_uid
from .state_files import StateFiles
from .state_rows import RecoveredRows, split_rows
from .table_schema import KIND_SNAPSHOT, KIND_STATE, KIND_SUBSCRIPTION, SCHEMA, plain
from .wal_binding import Table

APP_ID = "durable-streams-server"
TABLE_NAME = "streams"

CHECKPOINT_INTERVAL = 20
"""Commits between Delta log checkpoints (``delta.checkpointInterval``): log replay reads one
checkpoint and at most this many commit files."""
_PAYLOAD_COLUMNS = {
    "data": ColumnProperties(statistics_enabled="NONE", dictionary_enabled=False),
    "meta": ColumnProperties(statistics_enabled="NONE"),
}
"""No statistics for the payload columns: nothing is ever looked up by message bytes or JSON,
and Parquet statistics of a binary column repeat its smallest and largest value: two extra
copies of a 1 MiB message per row group (measured: compacted files 28 % larger than their rows).

No dictionary for the messages (``data``, PLAIN pages): messages rarely repeat, and a
dictionary-encoded column is decoded twice -- the dictionary page into a buffer of its own,
then each value copied from it into the column read -- where a PLAIN page is copied once,
straight from the page into the column. Measured on a catch-up read of 1 MiB messages (the
server's freed pages are handed back at once, ``allocators``): ~520 fresh pages faulted per
message read with a dictionary, ~260 without; 230-290 MiB/s became 320-390 MiB/s. Files
written before keep their dictionary pages and read as they did."""
_STATE_KINDS = (KIND_STATE, KIND_SUBSCRIPTION)
"""The rows recovery and state checkpoints read (``state_files``)."""
_ONE_FILE = 1 << 40
"""``target_file_size`` of a compaction rewrite: each bin becomes one file (``compaction_plan``)."""


def table_uri(storage_uri: str) -> str:
    return storage_uri.rstrip("/") + "/" + TABLE_NAME


class DeltaLog:
    def __init__(
        self,
        storage_uri: str,
        storage_options: Mapping[str, str],
        *,
        log_retention_hours: int = 0,
        checkpoint_interval: int = CHECKPOINT_INTERVAL,
        before_create: Callable[[str], None] = lambda uri: None,
    ) -> None:
        """``before_create``: called with the table's URI where no table is, before one is made
        there; raising refuses it (``wal_binding.check_present``)."""
        self.uri = table_uri(storage_uri)
        self.storage_options = dict(storage_options)
        self.checkpoint_interval = checkpoint_interval
        self._configuration = table_properties(checkpoint_interval, log_retention_hours)
        self._table = self._open_or_create(before_create)
        self._sync = LocalSync.for_uri(self.uri)
        """A local table's commits are fsynced before they count (``local_sync``)."""
        if self._sync is not None:
            self._sync.opened(self._table.version(), _active_paths(self._table))
        self._lock = threading.Lock()
        self.owner: Owner | None = None
        """The epoch this handle commits under (``claim``); ``None``: unclaimed, commits unfenced
        (tools and tests that write a table directly; the server always claims first)."""
        self.recovered_checkpoint = (0, 0, 0)
        """After ``load_rows``: rows of the state checkpoint, commits and rows after it."""
        self._examined = (-1, 0)
        """(version, epoch): the newest handover request up to that version asked ``epoch`` to let
        go (``handover_asked``); advanced by this handle's own commits right after it (``_write``)."""

    def _open_or_create(self, before_create: Callable[[str], None]) -> DeltaTable:
        try:
            table = DeltaTable(self.uri, storage_options=self.storage_options)
        except TableNotFoundError:
            before_create(self.uri)
            return DeltaTable.create(
                self.uri,
                SCHEMA,
                mode="ignore",
                name="durable_streams",
                description="Durable Streams messages and stream state",
                configuration=self._configuration,
                storage_options=self.storage_options,
            )
        if OWNER_KEY not in table.metadata().configuration:  # (an owned table: aligned by its next claim)
            self._align_properties(table, None)
        return table

    def _align_properties(self, table: DeltaTable, owner: Owner | None) -> None:
        """Set the table properties this server needs where they differ (a commit only then)."""
        configured = table.metadata().configuration
        if any(configured.get(key) != value for key, value in self._configuration.items()):
            properties = owner_properties(owner) if owner is not None else None
            table.alter.set_table_properties(
                self._configuration, raise_if_not_exists=False, commit_properties=properties
            )

    def committed_lsn(self) -> int:
        """The highest LSN any commit covers (0 for a new table)."""
        with self._lock:
            return self._table.transaction_version(APP_ID) or 0

    def refreshed_lsn(self) -> int:
        """``committed_lsn`` after re-reading the log: a commit that raised may have landed
        (and on a local disk, its files are synced before it counts: ``local_sync``)."""
        with self._lock:
            self._table.update_incremental()
            if self._sync is not None:
                self._sync.commit_made(self._table.version())
            return self._table.transaction_version(APP_ID) or 0

    def landed(self, through_lsn: int) -> bool:
        """After a failed commit attempt: whether one of this owner's epoch covering ``through_lsn``
        landed; ``Fenced`` if a newer owner claimed the table, whose commits continue the LSNs
        (``flusher``). The epoch is checked after the LSN is read, on that snapshot or a newer
        one: naming this epoch still, it says every commit the LSN counts is this owner's."""
        lsn = self.refreshed_lsn()
        with self._lock:
            self._check_owner()
        return lsn >= through_lsn

    def vacuum(self, retention_hours: int) -> int:
        """Delete unreferenced data files older than ``retention_hours``; return how many.

        Under the write lock and on a refreshed snapshot, so no file committed by this
        server can look unreferenced."""
        with self._lock:
            self._table.update_incremental()
            self._check_owner()
            with self._fencing():
                removed = self._table.vacuum(
                    retention_hours=retention_hours,
                    enforce_retention_duration=False,
                    dry_run=False,
                    commit_properties=self._properties(),
                )
        return len(removed)

    def load_rows(self) -> RecoveredRows:
        """The newest state of every stream incarnation (and bucket) by uid, the idle live
        streams left unparsed (``state_rows``), and of every subscription: the state
        checkpoint's rows and the rows after it (``state_checkpoint``)."""
        with self._lock:
            since = self._table.transaction_version(CHECKPOINT_APP_ID) or 0
            files = StateFiles.plan(self._table, self.storage_options, _STATE_KINDS, since)
        raw = files.read(["kind", "stream", "stream_uid", "lsn", "data", "meta"])
        lsns = raw["lsn"]
        after = lsns.filter(pc.greater(lsns, since))
        at_checkpoint = pc.sum(pc.equal(lsns, since)).as_py() or 0
        self.recovered_checkpoint = (at_checkpoint, pc.count_distinct(after).as_py(), len(after))
        rows = pa.array(np.arange(raw.num_rows, dtype=np.int64))
        newest = newest_per_uid(raw.select(["kind", "stream_uid", "lsn", "data"]).append_column("row", rows))
        read = raw.select(["stream", "stream_uid", "meta"]).to_batches()
        del raw, lsns, after  # (``split_rows`` lets go of each batch read once it has copied what it keeps)
        return split_rows(newest, read, state_kind=KIND_STATE)

    def load_states(self) -> dict[int, dict[str, Any]]:
        return self.load_rows().all_states()

    def load_subscriptions(self) -> dict[int, dict[str, Any] | None]:
        return self.load_rows().subscriptions

    def write_state_checkpoint(self) -> int:
        """Append the newest state and subscription row of every uid, re-stamped with the
        LSN the table covers now (``state_checkpoint``); the number of rows, 0 if there is
        nothing new since the last checkpoint."""
        with self._lock:
            self._table.update_incremental()
            covered = self._table.transaction_version(APP_ID) or 0
            since = self._table.transaction_version(CHECKPOINT_APP_ID) or 0
            if covered <= since:
                return 0
            files = StateFiles.plan(self._table, self.storage_options, _STATE_KINDS, since)
        checkpoint = Checkpoint(files, covered)
        rows = checkpoint.rows_to_write()
        with self._lock:
            properties = self._properties(Transaction(app_id=CHECKPOINT_APP_ID, version=covered))
            self._write(
                rows,
                mode="append",
                commit_properties=properties,
                writer_properties=WriterProperties(max_row_group_size=BATCH_ROWS, column_properties=_PAYLOAD_COLUMNS),
            )
            self._committed()
        return checkpoint.rows

    # -- maintenance writes, through the writer's handle under its lock ---------------------
    #
    # delta-rs refuses an append whose snapshot predates a commit that removed files, so
    # every commit that removes files goes through this handle, under the lock the flusher
    # commits under: the flusher's next append starts from a snapshot that includes it.

    def file_spans(self) -> list[FileSpan]:
        """Every data file of a refreshed snapshot with the LSN span of its rows."""
        with self._lock:
            self._table.update_incremental()
            return _spans(self._table)

    def rewrite(self, bin_: Bin, rows: pa.Table | pa.RecordBatchReader, max_row_group_rows: int) -> bool:
        """Replace the rows of ``bin_``'s files by ``rows`` (streamed into the new file when a
        reader) in one commit; ``False`` (and nothing written, nothing read from ``rows``) if
        the files holding that LSN span are no longer those of the bin."""
        with self._lock:
            self._table.update_incremental()
            if spans_intersecting(_spans(self._table), bin_.lo, bin_.hi) != bin_.paths:
                return False
            self._write(
                rows,
                mode="overwrite",
                predicate=bin_.predicate,
                commit_properties=self._properties(),
                target_file_size=_ONE_FILE,
                writer_properties=WriterProperties(
                    max_row_group_size=max_row_group_rows, compression="ZSTD", column_properties=_PAYLOAD_COLUMNS
                ),
            )
            self._committed()
        return True

    def _committed(self) -> None:
        """(Under the lock, after a commit through the handle.) On a local disk, fsync what
        it wrote (``local_sync``); trim the Delta log one commit before delta-rs writes a log
        checkpoint (``log_trim``)."""
        if self._sync is not None:
            self._sync.commit_made(self._table.version())
        if trim_due(self._table.version(), self.checkpoint_interval):
            trim_log(self._table)

    def delete(self, predicate: str) -> None:
        """Delete the rows matching ``predicate`` (rewriting only the files that hold some)."""
        with self._lock:
            self._table.update_incremental()
            with self._fencing():
                self._table.delete(predicate, commit_properties=self._properties())
            self._table.update_incremental()
            self._committed()

    def commit(self, records: Iterable[Record[Header]], states: Mapping[int, dict[str, Any]], through_lsn: int) -> None:
        """Write the records' messages and snapshots plus the given states in one commit."""
        table, group_rows = clustered(commit_table(list(records), states, through_lsn))
        with self._lock:
            properties = self._properties(Transaction(app_id=APP_ID, version=through_lsn))
            self._write(
                table,
                mode="append",
                commit_properties=properties,
                writer_properties=WriterProperties(max_row_group_size=group_rows, column_properties=_PAYLOAD_COLUMNS),
            )
            self._committed()
        del table
        pa.default_memory_pool().release_unused()  # a flush's buffers: give the pages back

    # -- ownership (``ownership``): every commit above carries the owner's epoch ----------

    def _properties(self, *transactions: Transaction) -> CommitProperties:
        """(Under the lock.) The properties of a commit on the handle's snapshot: the owner's
        epoch and name, after checking that the snapshot names no newer owner."""
        if self.owner is None:
            return CommitProperties(app_transactions=list(transactions))
        check_owner(self._table, self.owner)
        return owner_properties(self.owner, transactions)

    def _write(self, data: pa.Table | pa.RecordBatchReader, **options: Any) -> None:
        """(Under the lock.) ``write_deltalake`` on the handle, fenced. A commit landing right
        after the version ``handover_asked`` looked at leaves nothing new to look at."""
        before = self._table.version()
        with self._fencing():
            write_deltalake(self._table, data, **options)
        examined, asked = self._examined
        if examined == before and self._table.version() == before + 1:
            self._examined = (before + 1, asked)

    def _check_owner(self) -> None:
        if self.owner is not None:
            check_owner(self._table, self.owner)

    @contextmanager
    def _fencing(self) -> Iterator[None]:
        """(Under the lock, around a commit.) A commit refused because a newer owner claimed the
        table meanwhile (delta-rs: "Concurrent transaction failed") raises ``Fenced``."""
        try:
            yield
        except Exception as error:
            if self.owner is None:
                raise
            explained = fenced_by(self._table, self.owner, error)
            if explained is error:
                raise
            raise explained from error

    def identity(self) -> tuple[Table, bool]:
        """This table as a WAL names it (``wal_binding``), and whether anyone has owned it."""
        with self._lock:
            return Table(self.uri, str(self._table.metadata().id)), epoch_of(self._table) > 0

    def claim(self, node: Node, holds_wal: bool) -> Owner:
        """Claim the next epoch for ``node`` (``owner_log.claim_table``); every later commit of
        this handle carries it. ``holds_wal``: ``node``'s data directory holds WAL records."""
        self.owner = owner = claim_table(self._table, self._lock, self.uri, node, holds_wal)
        with self._lock, self._fencing():
            self._align_properties(self._table, owner)
            self._table.update_incremental()
        return owner

    def handover_asked(self) -> bool:
        """Whether a handover of this owner's epoch was asked for; ``Fenced`` if a newer
        owner claimed the table (checked on a refreshed snapshot). The handover ``txn`` is read
        (a read of the log since its checkpoint: ``owner_log``) only when the snapshot holds
        commits this handle has not looked at and did not make (``_write``)."""
        assert self.owner is not None
        with self._lock:
            self._table.update_incremental()
            check_owner(self._table, self.owner)
            version = self._table.version()
            if self._examined[0] != version:
                self._examined = (version, handover_asked(self._table))
            return self._examined[1] >= self.owner.epoch

    def release(self) -> None:
        """Let go of the table: a commit saying so; the next owner claims without asking."""
        if self.owner is None:
            return
        with self._lock, self._fencing():
            self._table.update_incremental()
            check_owner(self._table, self.owner)
            name_owner(self._table, released(self.owner))
            self.owner = released(self.owner)

    def _scan(self, columns: list[str], predicate: str) -> pa.Table:
        """Rows matching ``predicate``, files skipped by their min/max statistics."""
        with self._lock:
            reader = self._table.scan(columns=columns, predicate=predicate)
        return plain(pa.RecordBatchReader.from_stream(reader).read_all())

    def read_snapshot(self, uid: int, seq: int) -> tuple[str, bytes] | None:
        """The newest snapshot blob published for ``seq`` of stream ``uid``."""
        predicate = f"stream_uid = {uid} AND kind = '{KIND_SNAPSHOT}' AND seq = {seq}"
        table = self._scan(["lsn", "data", "meta"], predicate)
        if table.num_rows == 0:
            return None
        newest = table.sort_by([("lsn", "descending")]).slice(0, 1)
        return json.loads(newest["meta"][0].as_py())["content_type"], newest["data"][0].as_py()


def _active_paths(table: DeltaTable) -> list[str]:
    """The paths of the table's data files, as its ``add`` actions name them."""
    return [str(path) for path in pa.table(table.get_add_actions(flatten=True))["path"].to_pylist()]


def _spans(table: DeltaTable) -> list[FileSpan]:
    return spans_of(pa.table(table.get_add_actions(flatten=True)))
