"""The WAL identity of a data directory in ownership claims (``storage.ownership``).

A node's claim records its data directory's WAL id, so the same ``--node-id`` on another data
directory is told apart from a restart: refused while the recorded owner ran with WAL durability
and has not released the location, taken with ``--take-over force`` (and the old directory's WAL
is then stale: never replayed). Owner records from before WAL ids have none: unknown, treated as
before (the node id alone). Real Delta tables in temp dirs; the decisions themselves are pure.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from durable_streams_server.storage.delta_log import DeltaLog
from durable_streams_server.storage.ownership import (
    WAL_ID_FILE,
    Node,
    OwnedElsewhere,
    Owner,
    OwnershipError,
    decide,
    wal_id_for,
)


def _node(wal_id: str, **options: object) -> Node:
    return Node("n1", data_dir=f"/data/{wal_id}", wal_id=wal_id, **options)  # type: ignore[arg-type]


def _owner(wal_id: str | None, durability: str = "wal", state: str = "serving") -> Owner:
    return Owner("n1", 3, "", "/data/old", "host", 1, durability, state, wal_id)  # type: ignore[arg-type]


def test_a_data_dir_keeps_its_wal_id(tmp_path: Path) -> None:
    first = wal_id_for(tmp_path / "a")
    assert first == wal_id_for(tmp_path / "a") == (tmp_path / "a" / WAL_ID_FILE).read_text().strip()
    assert wal_id_for(tmp_path / "b") != first


def test_the_same_node_with_another_wal_is_decided_like_another_node() -> None:
    lost = _owner("old")
    assert decide(_node("new"), 3, lost) == "refuse"
    assert decide(_node("new", take_over="ask"), 3, lost) == "ask"
    assert decide(_node("new", take_over="force"), 3, lost) == "force"
    assert decide(_node("old"), 3, lost) == "claim"  # (a restart on its data dir)


def test_a_released_or_delta_owner_or_one_without_a_wal_id_is_taken_back_by_its_node_id() -> None:
    assert decide(_node("new"), 3, _owner("old", state="released")) == "claim"
    assert decide(_node("new"), 3, _owner("old", durability="delta")) == "claim"
    assert decide(_node("new"), 3, _owner(None)) == "claim"
    recorded_before_wal_ids = {k: v for k, v in json.loads(_owner("x").to_json()).items() if k != "wal_id"}
    parsed = Owner.from_json(json.dumps(recorded_before_wal_ids))
    assert parsed is not None and parsed.wal_id is None


def test_a_lost_wal_is_refused_then_given_up_by_force_and_its_data_dir_is_stale_after(tmp_path: Path) -> None:
    DeltaLog(str(tmp_path), {}).claim(_node("old"), holds_wal=False)
    with pytest.raises(OwnedElsewhere) as refused:
        DeltaLog(str(tmp_path), {}).claim(_node("new"), holds_wal=False)
    message = str(refused.value)
    assert "owned by this node ('n1') with another write-ahead log" in message
    assert "/data/old" in message and "--take-over force" in message
    assert DeltaLog(str(tmp_path), {}).claim(_node("new", take_over="force"), holds_wal=False).epoch == 2
    with pytest.raises(OwnershipError, match="Move the data dir's 'wal' folder aside"):
        DeltaLog(str(tmp_path), {}).claim(_node("old"), holds_wal=True)  # (its records were given up)


def test_an_owner_claimed_without_a_wal_id_is_taken_back_by_its_node_on_another_data_dir(tmp_path: Path) -> None:
    DeltaLog(str(tmp_path), {}).claim(Node("n1", data_dir="/data/old"), holds_wal=False)
    assert DeltaLog(str(tmp_path), {}).claim(_node("new"), holds_wal=False).epoch == 2
