"""Subscription records in Delta (one ``subscription`` row per subscription and commit, the
newest wins at recovery) and through the transition recovery replays them with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from durable_streams_server.engine.transitions import LiveState
from durable_streams_server.storage.delta_log import DeltaLog
from durable_streams_server.storage.records import (
    SIGNING_KEYS_UID,
    Header,
    Record,
    SigningKeysHeader,
    SubscriptionHeader,
)
from durable_streams_server.storage.view import Recovery


def _sub(lsn: int, uid: int, state: dict[str, Any] | None) -> Record[Header]:
    return Record(lsn, uid, SubscriptionHeader(f"v1/stream/__ds/subscriptions/s{uid}", state, 1000 + lsn))


def test_one_row_per_subscription_and_commit_and_the_newest_row_wins(tmp_path: Path) -> None:
    delta = DeltaLog(str(tmp_path), {})
    keys = Record(2, SIGNING_KEYS_UID, SigningKeysHeader({"token_key": "k"}, 1002))
    delta.commit([_sub(1, 1, {"generation": 1}), keys, _sub(3, 1, {"generation": 2}), _sub(4, 4, {"g": 0})], {}, 4)
    table = DeltaTable(f"{tmp_path}/streams").to_pyarrow_table(columns=["stream", "stream_uid", "kind", "lsn", "seq"])
    assert sorted(zip(*(table[name].to_pylist() for name in table.column_names), strict=True)) == [
        ("__ds/signing-keys", 0, "subscription", 2, 0),
        ("v1/stream/__ds/subscriptions/s1", 1, "subscription", 3, 0),
        ("v1/stream/__ds/subscriptions/s4", 4, "subscription", 4, 0),
    ]
    assert delta.load_subscriptions() == {0: {"token_key": "k"}, 1: {"generation": 2}, 4: {"g": 0}}
    delta.commit([_sub(5, 4, None)], {}, 5)
    assert delta.load_subscriptions() == {0: {"token_key": "k"}, 1: {"generation": 2}, 4: None}
    assert delta.committed_lsn() == 5
    assert delta.load_states() == {}  # no stream state rows came of it


def test_recovery_replays_subscription_records_over_the_delta_rows() -> None:
    live = LiveState(lambda: 7)
    rows: dict[int, dict[str, Any] | None] = {0: {"token_key": "old"}, 1: {"generation": 1}, 4: None}
    records = [_sub(10, 1, {"generation": 2}), _sub(11, 12, {"generation": 1}), _sub(12, 12, None)]
    live.load(Recovery({}, records, rows))
    assert (live.subscriptions.keys, live.subscriptions.states) == ({"token_key": "old"}, {1: {"generation": 2}})
    # The deletion leaves a tombstone for the next flush, so compaction purges its rows.
    tombstone = live.states_for({12})[12]
    assert (tombstone["type"], tombstone["name"], tombstone["deleted"]) == (
        "subscription",
        "v1/stream/__ds/subscriptions/s12",
        True,
    )
    live.apply(Record(13, SIGNING_KEYS_UID, SigningKeysHeader({"token_key": "new"}, 1013)))
    assert live.subscriptions.keys == {"token_key": "new"}
    assert live.states_for(set()) == {}
