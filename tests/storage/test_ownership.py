"""Ownership epochs on a real Delta table (``storage.ownership``, ``owner_log``).

Two ``DeltaLog`` handles on one local table stand for two servers on one storage location: a
claim, a refusal naming the owner, a restart of the same node, a handover asked for and given,
a forced takeover, and -- the point of it all -- a stale owner's commit refused both when its
snapshot predates the newer claim (Delta's conflict check) and when it has read that claim
(our snapshot check: Delta alone would accept it).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from deltalake import DeltaTable
from servers import wait_for

from durable_streams_server.storage.delta_log import APP_ID, DeltaLog
from durable_streams_server.storage.owner_log import HANDOVER_APP_ID, OWNER_APP_ID, ask_handover, newest_owner
from durable_streams_server.storage.ownership import (
    CLAIM_KEY,
    OWNER_KEY,
    Fenced,
    Node,
    OwnedElsewhere,
    OwnershipError,
    node_id_for,
)
from durable_streams_server.storage.records import AppendHeader, Header, Record


def _node(node_id: str, **options: object) -> Node:
    return Node(node_id, url=f"http://{node_id}.test", data_dir=f"/data/{node_id}", **options)  # type: ignore[arg-type]


def _append(delta: DeltaLog, lsn: int, uid: int = 7) -> None:
    record: Record[Header] = Record(lsn, uid, AppendHeader(lsn, 1_000 + lsn, None, None, False), (b"m%d" % lsn,))
    delta.commit([record], {uid: {"name": "v1/stream/s", "tail": lsn + 1, "written_ms": 1_000}}, lsn)


def _messages(tmp_path: Path) -> list[int]:
    table = DeltaTable(f"{tmp_path}/streams")
    rows = table.to_pyarrow_table(columns=["kind", "lsn"])
    kinds, lsns = rows["kind"].to_pylist(), rows["lsn"].to_pylist()
    return sorted(lsn for kind, lsn in zip(kinds, lsns, strict=True) if kind == "message")


def test_a_claim_raises_the_epoch_and_every_commit_carries_it(tmp_path: Path) -> None:
    delta = DeltaLog(str(tmp_path), {})
    owner = delta.claim(_node("a"), holds_wal=False)
    assert owner.epoch == 1
    _append(delta, 1)
    table = DeltaTable(f"{tmp_path}/streams")
    assert table.transaction_version(OWNER_APP_ID) == 1
    assert table.transaction_version(APP_ID) == 1
    newest = table.history(1)[0]
    assert '"node_id":"a"' in newest["durable_streams.owner"]


def test_another_node_is_refused_with_the_owner_named(tmp_path: Path) -> None:
    DeltaLog(str(tmp_path), {}).claim(_node("a"), holds_wal=False)
    version = DeltaTable(f"{tmp_path}/streams").version()
    with pytest.raises(OwnedElsewhere) as refused:  # (configured otherwise: still nothing written)
        DeltaLog(str(tmp_path), {}, log_retention_hours=5).claim(_node("b"), holds_wal=False)
    message = str(refused.value)
    assert "node 'a' at http://a.test" in message and "/data/a" in message and "--take-over" in message
    assert DeltaTable(f"{tmp_path}/streams").version() == version  # nothing changed


def test_the_owner_aligns_the_table_properties_once_it_has_claimed(tmp_path: Path) -> None:
    DeltaLog(str(tmp_path), {}).claim(_node("a"), holds_wal=False)
    DeltaLog(str(tmp_path), {}, log_retention_hours=5).claim(_node("a"), holds_wal=False)
    table = DeltaTable(f"{tmp_path}/streams")
    assert table.metadata().configuration["delta.logRetentionDuration"] == "interval 5 hours"
    assert table.transaction_version(OWNER_APP_ID) == 2


def test_the_same_node_takes_its_storage_back_and_the_old_handle_is_fenced(tmp_path: Path) -> None:
    old = DeltaLog(str(tmp_path), {})
    old.claim(_node("a"), holds_wal=False)
    _append(old, 1)
    restarted = DeltaLog(str(tmp_path), {})
    assert restarted.claim(_node("a"), holds_wal=True).epoch == 2
    # The old handle's snapshot predates the claim: Delta's conflict check refuses the commit.
    with pytest.raises(Fenced):
        _append(old, 2)
    assert _messages(tmp_path) == [1]


def test_a_stale_owner_that_has_read_the_newer_claim_is_refused_by_the_snapshot_check(tmp_path: Path) -> None:
    old = DeltaLog(str(tmp_path), {})
    old.claim(_node("a"), holds_wal=False)
    DeltaLog(str(tmp_path), {}).claim(_node("b", take_over="force"), holds_wal=False)
    old.refreshed_lsn()  # (its handle now holds the newer claim: Delta alone would take a lower version)
    with pytest.raises(Fenced) as fenced:
        _append(old, 1)
    assert "node 'b'" in str(fenced.value)
    assert _messages(tmp_path) == []


@pytest.mark.parametrize("operation", ["checkpoint", "delete", "vacuum"])
def test_maintenance_commits_are_fenced_too(tmp_path: Path, operation: str) -> None:
    old = DeltaLog(str(tmp_path), {})
    old.claim(_node("a"), holds_wal=False)
    _append(old, 1)
    DeltaLog(str(tmp_path), {}).claim(_node("b", take_over="force"), holds_wal=False)
    with pytest.raises(Fenced):
        if operation == "checkpoint":
            old.write_state_checkpoint()
        elif operation == "delete":
            old.delete("lsn = 1")
        else:
            old.vacuum(0)
    assert _messages(tmp_path) == [1]


def test_a_released_location_is_claimed_without_asking(tmp_path: Path) -> None:
    first = DeltaLog(str(tmp_path), {})
    first.claim(_node("a"), holds_wal=False)
    first.release()
    assert DeltaLog(str(tmp_path), {}).claim(_node("b"), holds_wal=False).epoch == 2
    with pytest.raises(Fenced):
        _append(first, 1)


def test_a_handover_asked_for_waits_for_the_owners_release(tmp_path: Path) -> None:
    owner = DeltaLog(str(tmp_path), {})
    owner.claim(_node("a"), holds_wal=False)
    _append(owner, 1)
    claimed: list[int] = []
    errors: list[BaseException] = []

    def take_over() -> None:
        try:
            node = _node("b", take_over="ask", poll_interval_s=0.05, take_over_timeout_s=20.0)
            claimed.append(DeltaLog(str(tmp_path), {}).claim(node, holds_wal=False).epoch)
        except BaseException as error:  # (reported below)
            errors.append(error)

    taker = threading.Thread(target=take_over)
    taker.start()
    while not owner.handover_asked():
        assert taker.is_alive(), errors
    assert claimed == []  # (nothing claimed while the owner holds the location)
    _append(owner, 2)  # the owner flushes what it acknowledged before letting go
    owner.release()
    taker.join(30)
    assert (claimed, errors) == ([2], [])
    assert _messages(tmp_path) == [1, 2]


def test_commits_and_polls_read_no_txn_from_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An app id's version costs a read of the log since its checkpoint: the snapshot check reads
    the epoch from the owner property instead, and the poll reads the handover ``txn`` only once
    another writer has committed, so neither costs more as the log grows."""
    owner = DeltaLog(str(tmp_path), {})
    owner.claim(_node("a"), holds_wal=False)
    assert not owner.handover_asked()
    reads: list[str] = []
    read = DeltaTable.transaction_version

    def counted(table: DeltaTable, app_id: str) -> int | None:
        reads.append(app_id)
        return read(table, app_id)

    monkeypatch.setattr(DeltaTable, "transaction_version", counted)
    for lsn in range(1, 6):
        _append(owner, lsn)
        assert not owner.handover_asked()
    assert reads == []
    ask_handover(DeltaTable(f"{tmp_path}/streams"), _node("b").owner(1, "releasing"), 1)
    assert owner.handover_asked()
    assert reads == [HANDOVER_APP_ID]


@pytest.mark.parametrize("refreshed", [False, True])
def test_a_handover_request_before_the_owners_commit_is_noticed(tmp_path: Path, refreshed: bool) -> None:
    """The owner's commit lands after a request its poll has not read: on a snapshot without it
    (Delta puts the commit after it), or on one that a refresh other than the poll's brought it in."""
    owner = DeltaLog(str(tmp_path), {})
    owner.claim(_node("a"), holds_wal=False)
    _append(owner, 1)
    assert not owner.handover_asked()
    ask_handover(DeltaTable(f"{tmp_path}/streams"), _node("b").owner(1, "releasing"), 1)
    if refreshed:
        owner.file_spans()
    _append(owner, 2)
    assert owner.handover_asked()


@pytest.mark.parametrize("timeout_s", [0.3, 0.0])
def test_an_owner_that_does_not_answer_keeps_a_wal_location(tmp_path: Path, timeout_s: float) -> None:
    """Also with no wait at all (a cluster's expired lease): the WAL owner's records may be on its disk only."""
    DeltaLog(str(tmp_path), {}).claim(_node("a", durability="wal"), holds_wal=False)
    node = _node("b", take_over="ask", poll_interval_s=0.05, take_over_timeout_s=timeout_s)
    with pytest.raises(OwnedElsewhere, match=rf"did not hand over within {timeout_s:g} s"):
        DeltaLog(str(tmp_path), {}).claim(node, holds_wal=False)
    assert DeltaTable(f"{tmp_path}/streams").transaction_version(OWNER_APP_ID) == 1


@pytest.mark.parametrize("timeout_s", [0.3, 0.0])
def test_an_owner_that_does_not_answer_loses_a_delta_location(tmp_path: Path, timeout_s: float) -> None:
    """With ``--durability delta`` everything it acknowledged is in Delta: taking over loses nothing.
    With no wait (0: a cluster's expired lease) the owner is still asked first, so a live one stops."""
    old = DeltaLog(str(tmp_path), {})
    old.claim(_node("a", durability="delta"), holds_wal=False)
    node = _node("b", take_over="ask", poll_interval_s=0.05, take_over_timeout_s=timeout_s)
    assert DeltaLog(str(tmp_path), {}).claim(node, holds_wal=False).epoch == 2
    assert DeltaTable(f"{tmp_path}/streams").transaction_version(HANDOVER_APP_ID) == 1
    with pytest.raises(Fenced):
        _append(old, 1)


def test_a_wal_written_before_another_owner_is_not_replayed(tmp_path: Path) -> None:
    DeltaLog(str(tmp_path), {}).claim(_node("a"), holds_wal=False)
    DeltaLog(str(tmp_path), {}).claim(_node("b", take_over="force"), holds_wal=False)
    with pytest.raises(OwnershipError, match="write-ahead log in /data/a holds records"):
        DeltaLog(str(tmp_path), {}).claim(_node("a"), holds_wal=True)
    assert DeltaTable(f"{tmp_path}/streams").transaction_version(OWNER_APP_ID) == 2


def test_two_nodes_claiming_at_once_get_one_epoch_each_never_the_same(tmp_path: Path) -> None:
    DeltaLog(str(tmp_path), {})  # (the table exists before the race)
    epochs: list[int] = []
    fenced: list[BaseException] = []
    start = threading.Barrier(2)

    def claim(node_id: str) -> None:
        delta = DeltaLog(str(tmp_path), {})
        start.wait()
        try:
            epochs.append(delta.claim(_node(node_id, take_over="force"), holds_wal=False).epoch)
        except Fenced as error:
            fenced.append(error)

    threads = [threading.Thread(target=claim, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(set(epochs)) == len(epochs) and len(epochs) + len(fenced) == 2
    assert DeltaTable(f"{tmp_path}/streams").transaction_version(OWNER_APP_ID) == max(epochs)


def test_a_node_id_is_kept_in_the_data_dir(tmp_path: Path) -> None:
    made = node_id_for(tmp_path, None)
    assert made and node_id_for(tmp_path, None) == made
    assert node_id_for(tmp_path, "given") == "given"


def test_a_claim_without_a_wait_goes_on_through_an_old_owners_concurrent_commits(tmp_path: Path) -> None:
    """A cluster claims an expired lease's storage without waiting (``take_over_timeout_s=0``);
    the old owner may still run (its node paused) and commit meanwhile: its flush, or its release
    once it sees the handover asked. Such a commit landing between the claim's snapshot and its
    commit failed the claim (the shard server's start failed, the shard's lease was let go).
    Now the claim is asked again: epoch 2, and every commit the old owner made at epoch 1 is
    in the table under it; nothing it tries after the claim lands. (Three tables: the old owner
    commits back to back, so a claim meets its commits most times.)"""
    for table in range(3):
        location = tmp_path / str(table)
        old = DeltaLog(str(location), {})
        old.claim(_node("a", durability="delta"), holds_wal=False)
        landed: list[int] = []

        def keep_committing(old: DeltaLog = old, landed: list[int] = landed) -> None:
            """Appends, each followed by a release (a commit naming the owner: the metadata change
            that conflicts with a claim's), owning the table again after it: until fenced."""
            serving, lsn = old.owner, 1
            while lsn < 10_000:
                try:
                    _append(old, lsn)
                    landed.append(lsn)
                    old.release()
                except Fenced:
                    return
                old.owner = serving
                lsn += 1

        committer = threading.Thread(target=keep_committing)
        committer.start()
        wait_for(lambda landed=landed: len(landed) >= 3, interval_s=0.005)  # (the old owner commits)
        node = _node("b", take_over="ask", poll_interval_s=0.05, take_over_timeout_s=0.0)
        claimed = DeltaLog(str(location), {}).claim(node, holds_wal=False)
        committer.join(timeout=30)
        assert not committer.is_alive(), "the old owner was never fenced"
        assert claimed.epoch == 2
        assert _messages(location) == landed  # (every commit that landed is there; none after the claim)


def test_a_copy_of_a_data_dir_is_told_from_its_restart_by_the_claims_it_made(tmp_path: Path) -> None:
    """Two copies of one data dir: the same node id and WAL id. The one that made the table's
    newest claim restarts into it; the other is refused (a WAL of its own or not), unless it asks
    the owner to hand over; a data dir whose claims are unknown (from before them) restarts as before."""
    copy_a = _node("n", wal_id="w", claim="c1", claims=())
    DeltaLog(str(tmp_path), {}).claim(copy_a, holds_wal=False)
    again = _node("n", wal_id="w", claim="c2", claims=("c1",))  # (copy a restarting: it made c1)
    assert DeltaLog(str(tmp_path), {}).claim(again, holds_wal=True).claim == "c2"
    version = DeltaTable(f"{tmp_path}/streams").version()
    for holds_wal in (False, True):
        copy_b = _node("n", wal_id="w", claim="c3", claims=("c1",))  # (a copy made before c2)
        with pytest.raises(OwnedElsewhere, match="was claimed by another copy of this data dir"):
            DeltaLog(str(tmp_path), {}).claim(copy_b, holds_wal=holds_wal)
    assert DeltaTable(f"{tmp_path}/streams").version() == version  # (nothing changed)
    unknown = _node("n", wal_id="w", claim="c4", claims=None)
    assert DeltaLog(str(tmp_path), {}).claim(unknown, holds_wal=True).epoch == 3


def test_a_wal_replayed_under_another_node_id_names_the_id_that_wrote_it(tmp_path: Path) -> None:
    """The operator gave ``--node-id`` other than the one the data dir ran with: the WAL is this
    directory's (its WAL id), so the way out is that id, not moving the WAL aside."""
    DeltaLog(str(tmp_path), {}).claim(_node("kept", wal_id="w"), holds_wal=False)
    with pytest.raises(OwnershipError) as refused:
        DeltaLog(str(tmp_path), {}).claim(_node("given", wal_id="w"), holds_wal=True)
    assert "runs as node 'given' (--node-id)" in str(refused.value)
    assert "Start it with --node-id kept to replay the log" in str(refused.value)
    assert "aside" not in str(refused.value)


def test_the_claim_id_has_a_property_of_its_own_read_beside_its_epoch(tmp_path: Path) -> None:
    """The owner's JSON stays as a release without claim ids reads it (an unknown field would
    fail it); the claim id is read only beside an owner of its epoch."""
    DeltaLog(str(tmp_path), {}).claim(_node("n", wal_id="w", claim="c1"), holds_wal=False)
    table = DeltaTable(f"{tmp_path}/streams")
    configuration = table.metadata().configuration
    assert '"claim"' not in configuration[OWNER_KEY] and configuration[CLAIM_KEY] == "1:c1"
    owner = newest_owner(table)
    assert owner is not None and (owner.epoch, owner.claim) == (1, "c1")
    DeltaLog(str(tmp_path), {}).claim(_node("n", wal_id="w"), holds_wal=False)  # (a claim without an id)
    owner = newest_owner(DeltaTable(f"{tmp_path}/streams"))
    assert owner is not None and (owner.epoch, owner.claim) == (2, None)  # ("1:c1" left behind, not read)


def test_an_owner_named_with_fields_this_version_does_not_know_is_still_its_owner(tmp_path: Path) -> None:
    """A newer server's owner JSON, with a field added: read as no owner, a start of another node
    here would claim the table at once from a server that may hold acknowledged records."""
    DeltaLog(str(tmp_path), {}).claim(_node("newer", wal_id="w"), holds_wal=False)
    table = DeltaTable(f"{tmp_path}/streams")
    text = table.metadata().configuration[OWNER_KEY]
    table.alter.set_table_properties({OWNER_KEY: text[:-1] + ',"added_later":1}'}, raise_if_not_exists=False)
    owner = newest_owner(DeltaTable(f"{tmp_path}/streams"))
    assert owner is not None and (owner.node_id, owner.epoch, owner.wal_id) == ("newer", 1, "w")
    with pytest.raises(OwnershipError, match="'newer'"):
        DeltaLog(str(tmp_path), {}).claim(_node("older"), holds_wal=False)
    assert DeltaLog(str(tmp_path), {}).claim(_node("newer", wal_id="w"), holds_wal=True).epoch == 2  # (its restart)
