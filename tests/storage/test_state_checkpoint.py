"""State checkpoints on a real Delta table: recovery reads one row per uid after one,
whatever the number of flushes before it, and the newest state always wins."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from servers import MotoServer

from durable_streams_server.storage.data_files import WHOLE_FILE_BYTES
from durable_streams_server.storage.delta_log import DeltaLog
from durable_streams_server.storage.records import AppendHeader, Header, Record, SubscriptionHeader
from durable_streams_server.storage.state_checkpoint import BATCH_ROWS, CheckpointPolicy, newest_per_uid
from durable_streams_server.storage.state_files import StateFiles


def _state(uid: int, tail: int, **extra: Any) -> dict[str, Any]:
    return {"name": f"v1/stream/s{uid}", "tail": tail, "written_ms": 1000 + tail, **extra}


def _flush(
    delta: DeltaLog, lsn: int, states: dict[int, dict[str, Any]], records: tuple[Record[Header], ...] = ()
) -> None:
    delta.commit(list(records), states, lsn)


def _location(store: str, tmp_path: Path, moto: MotoServer) -> tuple[str, dict[str, str]]:
    """A table's URI and storage options: in ``tmp_path``, or in a fresh bucket of moto's."""
    if store == "local":
        return str(tmp_path), {}
    bucket = f"state-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    return f"s3://{bucket}/shard", moto.storage_options()


def _state_rows(tmp_path: Path) -> pa.Table:
    table = DeltaTable(f"{tmp_path}/streams").to_pyarrow_table(columns=["kind", "stream_uid", "lsn", "meta"])
    return table.filter(pa.compute.equal(table["kind"], "state"))


def test_newest_per_uid_takes_the_highest_lsn_of_each_kind_and_uid() -> None:
    rows = pa.table(
        {
            "kind": ["state", "state", "subscription", "state", "subscription"],
            "stream_uid": [1, 1, 1, 2, 1],
            "lsn": [5, 9, 3, 4, 7],
            "meta": ["a", "b", "c", "d", "e"],
        }
    )
    newest = newest_per_uid(rows)
    columns = (newest[name].to_pylist() for name in ("kind", "stream_uid", "meta"))
    assert sorted(zip(*columns, strict=True)) == [
        ("state", 1, "b"),
        ("state", 2, "d"),
        ("subscription", 1, "e"),
    ]


def test_recovery_after_a_checkpoint_reads_the_checkpoint_and_what_came_after(tmp_path: Path) -> None:
    delta = DeltaLog(str(tmp_path), {})
    lsn = 0
    for tail in range(1, 41):  # 40 flushes of stream 1, every 10th also touches stream 2
        lsn += 1
        states = {1: _state(1, tail)}
        if tail % 10 == 0:
            states[2] = _state(2, tail // 10, deleted=tail == 40)
        _flush(delta, lsn, states)
    sub = Record(lsn + 1, 7, SubscriptionHeader("v1/stream/__ds/subscriptions/x", {"generation": 3}, 2000))
    lsn += 1
    _flush(delta, lsn, {}, (sub,))
    before = delta.load_rows()
    before_states = before.all_states()
    assert delta.recovered_checkpoint == (0, 41, 45)  # no checkpoint: every row of 41 commits is read

    assert delta.write_state_checkpoint() == 3  # stream 1, the tombstone of stream 2, the subscription
    assert delta.write_state_checkpoint() == 0  # nothing new since
    after = delta.load_rows()
    assert after.all_states() == before_states and after.subscriptions == before.subscriptions
    assert delta.recovered_checkpoint == (4, 0, 0)  # its 3 rows + the flush it was taken at
    assert before.states[2]["deleted"] is True  # the tombstone stays (parsed now): a purge to resume

    for tail in range(41, 44):
        lsn += 1
        _flush(delta, lsn, {1: _state(1, tail)})
    rows = delta.load_rows()
    assert rows.all_states()[1]["tail"] == 43 and rows.subscriptions == {7: {"generation": 3}}
    assert delta.recovered_checkpoint == (4, 3, 3)
    # every row is still in the table: only compaction drops superseded ones
    assert _state_rows(tmp_path).num_rows == 40 + 4 + 2 + 3


def test_a_flush_that_commits_while_a_checkpoint_is_taken_wins_over_it(tmp_path: Path) -> None:
    delta = DeltaLog(str(tmp_path), {})
    _flush(delta, 1, {1: _state(1, 1)})
    assert delta.write_state_checkpoint() == 1
    _flush(delta, 2, {1: _state(1, 2)})  # lsn 2 > the checkpoint's 1
    assert json.loads(json.dumps(delta.load_states()))["1"]["tail"] == 2


def test_policy_folds_rows_when_they_are_worth_it_and_bounds_the_commits_read() -> None:
    one_stream = CheckpointPolicy(min_commits=100, max_commits=1000)
    one_stream.taken(1)
    for _ in range(99):
        one_stream.note_commit(1)
    assert not one_stream.due()
    one_stream.note_commit(1)
    assert one_stream.due()
    many_idle = CheckpointPolicy(min_commits=100, max_commits=1000)
    many_idle.taken(300_000)  # rewriting 300k rows to fold 100 is not worth it ...
    for _ in range(999):
        many_idle.note_commit(1)
        assert not many_idle.due()
    many_idle.note_commit(1)
    assert many_idle.due()  # ... until recovery would open too many files


@pytest.mark.parametrize("store", ["local", "s3"])
def test_state_rows_read_from_the_files_are_the_rows_a_delta_scan_finds(
    store: str, tmp_path: Path, moto: MotoServer
) -> None:
    """Recovery and checkpoints read the state rows from the data files themselves
    (``state_files``): the same rows a Delta scan with the same predicate finds, from small
    flush files fetched whole, from one larger than ``WHOLE_FILE_BYTES`` read by its row groups, and
    from files a DELETE rewrote."""
    uri, options = _location(store, tmp_path, moto)
    delta = DeltaLog(uri, options)
    for lsn in range(1, 13):  # (one record per flush: the tail is the LSN)
        tail = lsn
        size = WHOLE_FILE_BYTES + 4096 if tail == 7 else 100  # (flush 7 writes one file larger than that)
        append = Record(lsn, tail % 3 + 1, AppendHeader(tail, 1000 + tail, None, None, False), (b"x" * size,))
        sub = Record(lsn, 9, SubscriptionHeader("v1/stream/__ds/subscriptions/s", {"generation": tail}, 2000))
        _flush(delta, lsn, {tail % 3 + 1: _state(tail % 3 + 1, tail)}, (append, sub) if tail % 4 == 0 else (append,))
        if tail == 5:
            assert delta.write_state_checkpoint() == 4  # three streams and the subscription
        if tail == 9:  # (a purge's DELETE: delta-rs rewrites the files it touches, with view types)
            delta.delete("stream_uid = 1 AND kind = 'message'")
    since = 5
    plan = StateFiles.plan(delta._table, options, ("state", "subscription"), since)
    assert any(size > WHOLE_FILE_BYTES for _, size in plan.files)
    found = plan.read()
    scanned = DeltaTable(f"{uri}/streams", storage_options=options).to_pyarrow_table(
        filters=[("kind", "in", ["state", "subscription"]), ("lsn", ">=", since)]
    )
    order = [("lsn", "ascending"), ("kind", "ascending"), ("stream_uid", "ascending")]
    assert found.num_rows == 4 + 1 + 7 + 2  # the checkpoint's rows, flush 5's, a state per flush after, 2 subscriptions
    assert found.sort_by(order).to_pylist() == scanned.select(found.column_names).sort_by(order).to_pylist()
    assert delta.load_rows().all_states()[2]["tail"] == 10


@pytest.mark.parametrize("store", ["local", "s3"])
def test_a_checkpoint_of_many_streams_writes_the_newest_row_of_each(
    store: str, tmp_path: Path, moto: MotoServer
) -> None:
    """A checkpoint reads its keys first, then the rows it keeps file by file, a batch at a time
    (``state_checkpoint.Checkpoint``): what it writes is ``newest_per_uid`` of every row it
    covers, over files of several batches (a previous checkpoint's among them) and both kinds."""
    uri, options = _location(store, tmp_path, moto)
    delta = DeltaLog(uri, options)
    rng = random.Random(7)
    streams = 3 * BATCH_ROWS + 5
    subscribed: set[int] = set()
    _flush(delta, 1, {uid: _state(uid, 0) for uid in range(streams)})
    for lsn in range(2, 6):
        uids = rng.sample(range(streams), 50)
        subscribed.update(uids)
        subs = tuple(
            Record(lsn, uid, SubscriptionHeader(f"v1/stream/__ds/subscriptions/s{uid}", {"generation": lsn}, 2000))
            for uid in uids
        )
        _flush(delta, lsn, {uid: _state(uid, lsn) for uid in rng.sample(range(streams), 2_000)}, subs)
        if lsn == 3:
            assert delta.write_state_checkpoint() == streams + len(subscribed)
    delta._table.update_incremental()
    covered = StateFiles.plan(delta._table, options, ("state", "subscription"), 3).read()
    expected = newest_per_uid(covered)  # (re-stamped 5 by the checkpoint)
    flush_five = covered.filter(pa.compute.equal(covered["lsn"], 5))

    assert delta.write_state_checkpoint() == streams + len(subscribed) == expected.num_rows
    found = DeltaTable(f"{uri}/streams", storage_options=options).to_pyarrow_table(
        filters=[("kind", "in", ["state", "subscription"]), ("lsn", "=", 5)]
    )
    columns = ["kind", "stream_uid", "stream", "data", "meta"]

    def rows(*tables: pa.Table) -> list[tuple[Any, ...]]:
        return sorted(tuple(row.values()) for table in tables for row in table.select(columns).to_pylist())

    assert rows(found) == rows(expected, flush_five)  # the checkpoint's rows beside flush 5's (same LSN)


def test_state_rows_of_a_file_of_many_row_groups_are_read_in_slices_and_filtered(tmp_path: Path) -> None:
    """A file of more row groups than ``read`` decodes at once: every wanted row comes back
    once, from groups wanted whole (kept as decoded) and from groups wanted in part (filtered),
    and none of the others."""
    from deltalake import WriterProperties, write_deltalake

    from durable_streams_server.storage.state_files import _GROUPS_AT_ONCE
    from durable_streams_server.storage.table_schema import SCHEMA

    count = 10 * (3 * _GROUPS_AT_ONCE + 1)  # (row groups of 10 rows: three slices and one more group)
    kinds = ["state" if index < count // 2 or index % 3 else "message" for index in range(count)]
    lsns = [index // 7 for index in range(count)]
    rows = pa.table(
        {
            "stream": [f"v1/stream/s{index}" for index in range(count)],
            "stream_uid": list(range(count)),
            "kind": kinds,
            "seq": [0] * count,
            "ts": pa.array([0] * count, pa.timestamp("us", tz="UTC")),
            "data": [b"\x00"] * count,
            "meta": [json.dumps(_state(index, index)) for index in range(count)],
            "lsn": lsns,
        },
        schema=SCHEMA,
    )
    write_deltalake(str(tmp_path), rows, writer_properties=WriterProperties(max_row_group_size=10))
    since = 4  # (rows 28 on: groups before the third are wanted in part or not at all)
    plan = StateFiles.plan(DeltaTable(str(tmp_path)), {}, ("state", "subscription"), since)

    found = plan.read(["stream_uid", "kind", "lsn", "meta"])
    expected = [index for index in range(count) if kinds[index] == "state" and lsns[index] >= since]
    assert sorted(found["stream_uid"].to_pylist()) == expected
    assert found.schema == pa.schema([SCHEMA.field(name) for name in ("stream_uid", "kind", "lsn", "meta")])
    assert [json.loads(meta)["tail"] for meta in found.sort_by("stream_uid")["meta"].to_pylist()] == expected


def test_recovery_keeps_each_sleeping_streams_newest_row_a_chunk_per_batch_read(tmp_path: Path) -> None:
    """Recovery copies the rows it keeps of the sleeping streams a batch at a time (letting go of
    each batch read): each stream's newest state is the one found, and only it."""
    from durable_streams_server.engine.cold_streams import ColdStreams

    delta = DeltaLog(str(tmp_path), {})
    uids = range(1, 201)
    _flush(delta, 1, {uid: _state(uid, 1) for uid in uids})  # 30 of its 200 rows superseded
    _flush(delta, 2, {uid: _state(uid, 2) for uid in range(1, 31)})  # 25 of its 30
    _flush(delta, 3, {uid: _state(uid, 3) for uid in range(1, 26)})
    newest = {uid: _state(uid, 3 if uid <= 25 else 2 if uid <= 30 else 1) for uid in uids}

    dormant = delta.load_rows().dormant
    assert len(dormant) == 200
    assert sorted(len(chunk) for chunk in dormant.states.chunks) == [5, 25, 170]
    assert [len(chunk) for chunk in dormant.names.chunks] == [len(chunk) for chunk in dormant.states.chunks]
    assert delta.load_rows().all_states() == newest
    cold = ColdStreams.of(dormant)
    assert {uid: cold.peek(uid) for uid in uids} == newest
    assert sorted(cold.names()) == sorted(state["name"] for state in newest.values())
