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
data          binary              the message bytes / the snapshot blob (null for state rows)
meta          string              state: the stream's (or bucket's) state as JSON;
                                  snapshot: its content type; message: batch length;
                                  subscription: its state as JSON (null: deleted)
lsn           int64               WAL position of the record that wrote the row
============  ==================  ===========================================================

A commit holds a batch of records' messages plus one ``state`` row per stream those
records touched, so data and the state it changes land in one atomic Delta commit. Each
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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from .records import (
    SIGNING_KEYS_NAME,
    AppendHeader,
    CreateHeader,
    Header,
    Record,
    SigningKeysHeader,
    SnapshotHeader,
    SubscriptionHeader,
)

APP_ID = "durable-streams-server"
TABLE_NAME = "streams"

SCHEMA = pa.schema(
    [
        pa.field("stream", pa.string(), nullable=False),
        pa.field("stream_uid", pa.int64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("data", pa.binary(), nullable=True),
        pa.field("meta", pa.string(), nullable=True),
        pa.field("lsn", pa.int64(), nullable=False),
    ]
)

KIND_MESSAGE = "message"
KIND_STATE = "state"
KIND_SNAPSHOT = "snapshot"
KIND_SUBSCRIPTION = "subscription"


def table_uri(storage_uri: str) -> str:
    return storage_uri.rstrip("/") + "/" + TABLE_NAME


class DeltaLog:
    def __init__(self, storage_uri: str, storage_options: Mapping[str, str]) -> None:
        self.uri = table_uri(storage_uri)
        self.storage_options = dict(storage_options)
        self._table = self._open_or_create()
        self._lock = threading.Lock()

    def _open_or_create(self) -> DeltaTable:
        try:
            return DeltaTable(self.uri, storage_options=self.storage_options)
        except TableNotFoundError:
            return DeltaTable.create(
                self.uri,
                SCHEMA,
                mode="ignore",
                name="durable_streams",
                description="Durable Streams messages and stream state",
                storage_options=self.storage_options,
            )

    def committed_lsn(self) -> int:
        """The highest LSN any commit covers (0 for a new table)."""
        with self._lock:
            return self._table.transaction_version(APP_ID) or 0

    def refreshed_lsn(self) -> int:
        """``committed_lsn`` after re-reading the log: a commit that raised may have landed."""
        with self._lock:
            self._table.update_incremental()
            return self._table.transaction_version(APP_ID) or 0

    def vacuum(self, retention_hours: int) -> int:
        """Delete unreferenced data files older than ``retention_hours``; return how many.

        Under the write lock and on a refreshed snapshot, so no file committed by this
        server can look unreferenced."""
        with self._lock:
            self._table.update_incremental()
            removed = self._table.vacuum(
                retention_hours=retention_hours, enforce_retention_duration=False, dry_run=False
            )
        return len(removed)

    def load_states(self) -> dict[int, dict[str, Any]]:
        """The newest state of every stream incarnation, by uid."""
        table = self._scan(["stream_uid", "lsn", "meta"], f"kind = '{KIND_STATE}'")
        newest: dict[int, tuple[int, str]] = {}
        for uid, lsn, meta in zip(
            table.column("stream_uid").to_pylist(),
            table.column("lsn").to_pylist(),
            table.column("meta").to_pylist(),
            strict=True,
        ):
            if uid not in newest or lsn > newest[uid][0]:
                newest[uid] = (lsn, meta)
        return {uid: json.loads(meta) for uid, (_, meta) in newest.items()}

    def commit(self, records: Iterable[Record[Header]], states: Mapping[int, dict[str, Any]], through_lsn: int) -> None:
        """Write the records' messages and snapshots plus the given states in one commit."""
        rows = _Rows()
        records = list(records)
        _add_subscription_rows(rows, records)
        names = {uid: state["name"] for uid, state in states.items()}
        for record in records:
            header = record.header
            if not record.messages:
                continue
            ts_us = header.ts * 1000
            if isinstance(header, SnapshotHeader):
                meta = json.dumps({"content_type": header.content_type})
                name = names.get(record.uid) or ""
                rows.add(name, record.uid, KIND_SNAPSHOT, header.seq, ts_us, record.messages[0], meta, record.lsn)
                continue
            if isinstance(header, CreateHeader):
                name, batches = names.get(record.uid) or header.name, header.batches
            elif isinstance(header, AppendHeader):
                name, batches = names.get(record.uid) or "", ()
            else:  # (no other kind carries messages)
                continue
            batch_starts = _batch_starts(batches or (len(record.messages),))
            for index, message in enumerate(record.messages):
                size = batch_starts.get(index, 1)
                batch_meta = f'{{"batch":{size}}}' if size > 1 else None
                rows.add(
                    name, record.uid, KIND_MESSAGE, header.first_seq + index, ts_us, message, batch_meta, record.lsn
                )
        for uid, state in states.items():
            meta = json.dumps(state, separators=(",", ":"))
            rows.add(state["name"], uid, KIND_STATE, state["tail"], state["written_ms"] * 1000, None, meta, through_lsn)
        properties = CommitProperties(app_transactions=[Transaction(app_id=APP_ID, version=through_lsn)])
        with self._lock:
            write_deltalake(self._table, rows.to_table(), mode="append", commit_properties=properties)
            self._table.update_incremental()

    def load_subscriptions(self) -> dict[int, dict[str, Any] | None]:
        """The newest state of every subscription (and the signing keys, uid 0) by uid;
        ``None`` for a deleted subscription."""
        table = self._scan(["stream_uid", "lsn", "meta"], f"kind = '{KIND_SUBSCRIPTION}'")
        newest: dict[int, tuple[int, str | None]] = {}
        for uid, lsn, meta in zip(
            table.column("stream_uid").to_pylist(),
            table.column("lsn").to_pylist(),
            table.column("meta").to_pylist(),
            strict=True,
        ):
            if uid not in newest or lsn > newest[uid][0]:
                newest[uid] = (lsn, meta)
        return {uid: json.loads(meta) if meta is not None else None for uid, (_, meta) in newest.items()}

    def _scan(self, columns: list[str], predicate: str) -> pa.Table:
        """Rows matching ``predicate``, files skipped by their min/max statistics."""
        with self._lock:
            reader = self._table.scan(columns=columns, predicate=predicate)
        table = pa.RecordBatchReader.from_stream(reader).read_all()
        # delta-rs scans produce view types; plain ones keep the rest of the code simple.
        return table.cast(pa.schema([SCHEMA.field(name).with_nullable(True) for name in columns]))

    def read_snapshot(self, uid: int, seq: int) -> tuple[str, bytes] | None:
        """The newest snapshot blob published for ``seq`` of stream ``uid``."""
        predicate = f"stream_uid = {uid} AND kind = '{KIND_SNAPSHOT}' AND seq = {seq}"
        table = self._scan(["lsn", "data", "meta"], predicate)
        if table.num_rows == 0:
            return None
        newest = table.sort_by([("lsn", "descending")]).slice(0, 1)
        return json.loads(newest["meta"][0].as_py())["content_type"], newest["data"][0].as_py()


class _Rows:
    """Column buffers for one commit's rows."""

    def __init__(self) -> None:
        self.columns: list[list[Any]] = [[] for _ in SCHEMA]

    def add(
        self, stream: str, uid: int, kind: str, seq: int, ts_us: int, data: bytes | None, meta: str | None, lsn: int
    ) -> None:
        for column, value in zip(self.columns, (stream, uid, kind, seq, ts_us, data, meta, lsn), strict=True):
            column.append(value)

    def to_table(self) -> pa.Table:
        arrays = [pa.array(values, field.type) for values, field in zip(self.columns, SCHEMA, strict=True)]
        return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _add_subscription_rows(rows: _Rows, records: Sequence[Record[Header]]) -> None:
    """One ``subscription`` row per uid: the state its newest record in the batch carries."""
    newest: dict[int, Record[Header]] = {}
    for record in records:
        if isinstance(record.header, SubscriptionHeader | SigningKeysHeader):
            newest[record.uid] = record
    for uid, record in newest.items():
        header = record.header
        if isinstance(header, SubscriptionHeader):
            name, state = header.name, header.state
        else:
            assert isinstance(header, SigningKeysHeader)
            name, state = SIGNING_KEYS_NAME, header.keys
        meta = json.dumps(state, separators=(",", ":")) if state is not None else None
        rows.add(name, uid, KIND_SUBSCRIPTION, 0, header.ts * 1000, None, meta, record.lsn)


def _batch_starts(sizes: Sequence[int]) -> dict[int, int]:
    """Index of each append batch's first message -> the batch's length."""
    starts, index = {}, 0
    for size in sizes:
        starts[index] = size
        index += size
    return starts
