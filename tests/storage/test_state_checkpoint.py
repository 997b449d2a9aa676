"""State checkpoints on a real Delta table: recovery reads one row per uid after one,
whatever the number of flushes before it, and the newest state always wins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from durable_streams_server.storage.delta_log import DeltaLog
from durable_streams_server.storage.records import Header, Record, SubscriptionHeader
from durable_streams_server.storage.state_checkpoint import CheckpointPolicy, newest_per_uid


def _state(uid: int, tail: int, **extra: Any) -> dict[str, Any]:
    return {"name": f"v1/stream/s{uid}", "tail": tail, "written_ms": 1000 + tail, **extra}


def _flush(
    delta: DeltaLog, lsn: int, states: dict[int, dict[str, Any]], records: tuple[Record[Header], ...] = ()
) -> None:
    delta.commit(list(records), states, lsn)


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
