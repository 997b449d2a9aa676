"""Which table a WAL's records are for (``storage/wal_binding.py``): the rule written out."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_streams_server.storage import wal_binding
from durable_streams_server.storage.ownership import OwnershipError
from durable_streams_server.storage.wal_binding import Table, TableGone, WalOfAnotherTable

X = Table("s3://bucket/x/streams", "id-x")
Y = Table("s3://bucket/y/streams", "id-y")


def test_records_are_replayed_only_into_the_table_the_wal_names(tmp_path: Path) -> None:
    wal_binding.bind(tmp_path, X, "c1")
    assert wal_binding.bound_table(tmp_path) == X
    wal_binding.check(tmp_path, X, 5, (1, 5), written=True)
    wal_binding.check(tmp_path, Table("s3a://bucket/x/streams", "id-x"), 5, (1, 5), written=True)  # (the id decides)
    wal_binding.check(tmp_path, Y, 0, (0, 0), written=False)  # (no records: nothing to misplace)
    for written in (True, False):
        with pytest.raises(WalOfAnotherTable) as refused:
            wal_binding.check(tmp_path, Y, 5, (1, 5), written=written)
        text = str(refused.value)
        assert "holds 5 records (LSNs 1-5) acknowledged for the table at s3://bucket/x/streams (id id-x)" in text
        assert "--storage-uri names the table at s3://bucket/y/streams (id id-y)" in text
        assert ("which no server has written yet" in text) is not written
    assert isinstance(refused.value, OwnershipError)  # (a refused start, exit code 3)


def test_a_wal_that_names_no_table_replays_only_into_one_a_server_wrote(tmp_path: Path) -> None:
    """A data dir from before the file: its restart on the table it wrote goes on as before; a
    table no server has written cannot be the one its records were acknowledged for."""
    wal_binding.check(tmp_path, X, 3, (7, 9), written=True)
    with pytest.raises(WalOfAnotherTable, match=r"holds 3 records \(LSNs 7-9\) acknowledged for another table"):
        wal_binding.check(tmp_path, X, 3, (7, 9), written=False)


def test_binding_again_names_the_new_table_and_a_torn_file_is_refused(tmp_path: Path) -> None:
    wal_binding.bind(tmp_path, X, "c1")
    wal_binding.bind(tmp_path, Y, "c2")
    assert wal_binding.bound_table(tmp_path) == Y
    assert (wal_binding.claims_on(tmp_path, Y), wal_binding.claims_on(tmp_path, X)) == (("c2",), None)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["wal-table"]  # (no partial file left)
    (tmp_path / "wal-table").write_text('{"uri": "s3://bucket/y/str')
    with pytest.raises(WalOfAnotherTable, match=r"cannot read .*wal-table"):
        wal_binding.check(tmp_path, Y, 1, (1, 1), written=True)


def test_a_wal_goes_on_only_from_where_its_table_has_committed(tmp_path: Path) -> None:
    wal_binding.bind(tmp_path, X, "c1")
    wal_binding.check_follows(tmp_path, X, 41, None, written=True)  # (no segment: a new data dir)
    wal_binding.check_follows(tmp_path, X, 41, 42, written=True)  # (a clean stop's empty segment: the next LSN)
    wal_binding.check_follows(tmp_path, X, 41, 30, written=True)  # (records from 30 on, some of them committed)
    with pytest.raises(WalOfAnotherTable, match=r"up to LSN 41, .* goes on from LSN 45: the records 42-44 were"):
        wal_binding.check_follows(tmp_path, X, 41, 45, written=True)
    wal_binding.check_follows(tmp_path, Y, 0, 45, written=True)  # (another table's WAL, empty: this one's LSNs anew)
    (tmp_path / "wal-table").unlink()  # (a data dir from before the file: its LSNs are the table's it wrote)
    with pytest.raises(WalOfAnotherTable, match="the records 42-44 were committed"):
        wal_binding.check_follows(tmp_path, X, 41, 45, written=True)
    wal_binding.check_follows(tmp_path, X, 0, 45, written=False)


def test_a_claim_noted_keeps_every_id_until_one_is_made_and_moves_no_wal(tmp_path: Path) -> None:
    """Starts that fail after noting their claim (refused, a store refusing the commit) let go of
    no id, so the one the table names stays known; nor do they move the WAL to the table they
    did not claim: its LSNs are still the other table's."""
    wal_binding.bind(tmp_path, X, "c1")
    for claim in ("c2", "c3", "c4"):
        wal_binding.note_claim(tmp_path, X, claim)
    assert wal_binding.claims_on(tmp_path, X) == ("c1", "c2", "c3", "c4")
    wal_binding.note_claim(tmp_path, Y, "d1")  # (refused by Y's owner, say)
    assert wal_binding.bound_table(tmp_path) == X and wal_binding.claims_on(tmp_path, Y) == ("d1",)
    wal_binding.check_follows(tmp_path, Y, 100, 5001, written=True)  # (X's LSNs: not Y's to check)
    wal_binding.bind(tmp_path, Y, "d2")  # (made)
    assert wal_binding.bound_table(tmp_path) == Y and wal_binding.claims_on(tmp_path, Y) == ("d2",)
    assert wal_binding.claims_on(tmp_path, X) is None


def test_a_start_where_the_named_table_is_not_is_refused(tmp_path: Path) -> None:
    """No table at the URI named (a volume not mounted, a prefix deleted), or one made again
    there (another id): refused, whatever the WAL holds; another URI is another table's start."""
    wal_binding.check_present(tmp_path, X.uri, None)  # (a data dir that names no table: a new one)
    wal_binding.bind(tmp_path, X, "c1")
    wal_binding.check_present(tmp_path, X.uri, "id-x")
    wal_binding.check_present(tmp_path, Y.uri, None)  # (moving to another URI: ``check`` decides on its records)
    with pytest.raises(TableGone) as refused:
        wal_binding.check_present(tmp_path, X.uri, None)
    assert "wrote at s3://bucket/x/streams (id id-x) is not there: it holds no table" in str(refused.value)
    assert f"remove {tmp_path / 'wal-table'}" in str(refused.value)
    with pytest.raises(TableGone, match=r"another table \(id id-z\): the one served was deleted and made again"):
        wal_binding.check_present(tmp_path, X.uri, "id-z")
    assert isinstance(refused.value, OwnershipError)  # (a refused start, exit code 3)


def test_a_data_dir_told_which_table_to_find_refuses_a_start_without_it(tmp_path: Path) -> None:
    """A cluster node's data dir for a shard it never served is told the table the cluster
    recorded (``expect``): a start where it is not is refused, naming the record in the way out.
    A file naming another table is left (its WAL's records may be that one's); one naming this
    table gains the record's name, and a claim made afterwards keeps it."""
    record = "s3://bucket/_cluster/tables/0000.json"
    fresh = tmp_path / "fresh"
    assert wal_binding.expect(fresh, X, record)
    assert wal_binding.named_at(fresh, X.uri) == X and wal_binding.named_at(fresh, Y.uri) is None
    wal_binding.check_present(fresh, X.uri, "id-x")
    with pytest.raises(TableGone) as refused:
        wal_binding.check_present(fresh, X.uri, None)
    assert f"the table {record} names at s3://bucket/x/streams (id id-x) is not there" in str(refused.value)
    assert f"remove {record} and {fresh / 'wal-table'}" in str(refused.value)
    assert not wal_binding.expect(fresh, X, record)  # (named so already: not written again)
    wal_binding.bind(fresh, X, "c1")
    with pytest.raises(TableGone, match=f"the table {record} names at"):
        wal_binding.check_present(fresh, X.uri, "id-z")
    served, other = tmp_path / "served", tmp_path / "other"
    served.mkdir()
    other.mkdir()
    wal_binding.bind(served, X, "c1")
    assert wal_binding.expect(served, X, record) and wal_binding.claims_on(served, X) == ("c1",)
    with pytest.raises(TableGone, match=f"remove {record} and"):
        wal_binding.check_present(served, X.uri, None)
    wal_binding.bind(other, Y, "c1")
    assert not wal_binding.expect(other, X, record) and wal_binding.bound_table(other) == Y


def test_the_table_named_is_found_however_its_location_is_spelled(tmp_path: Path) -> None:
    local = Table(f"{tmp_path}/delta/streams", "id-l")
    wal_binding.bind(tmp_path, local, "c1")
    for spelling in (f"file://{tmp_path}/delta/streams", f"{tmp_path}/delta/../delta/streams"):
        with pytest.raises(TableGone):
            wal_binding.check_present(tmp_path, spelling, None)
    wal_binding.bind(tmp_path, Table("s3a://bucket/x/streams", "id-x"), "c2")
    with pytest.raises(TableGone):
        wal_binding.check_present(tmp_path, X.uri, None)
    wal_binding.check_present(tmp_path, X.uri, "id-x")
    wal_binding.check_present(tmp_path, "s3://other-bucket/x/streams", None)  # (another location)


def test_naming_a_table_without_a_wal_keeps_the_claims_made_on_it(tmp_path: Path) -> None:
    wal_binding.bind(tmp_path, X, "c1")
    wal_binding.name(tmp_path, Y, wal_holds_records=False)
    assert wal_binding.bound_table(tmp_path) == Y and wal_binding.claims_on(tmp_path, X) == ("c1",)
    before = (tmp_path / "wal-table").stat().st_mtime_ns
    wal_binding.name(tmp_path, Y, wal_holds_records=False)  # (named already: not written again)
    assert (tmp_path / "wal-table").stat().st_mtime_ns == before


def test_a_wals_records_are_the_named_tables_or_with_no_file_any_tables(tmp_path: Path) -> None:
    assert wal_binding.wal_is_for(tmp_path, X)  # (a data dir from before the file)
    wal_binding.bind(tmp_path, X, "c1")
    assert wal_binding.wal_is_for(tmp_path, X) and not wal_binding.wal_is_for(tmp_path, Y)


def test_a_wal_that_still_holds_records_keeps_its_table_named(tmp_path: Path) -> None:
    """A delta-mode start on another table while the WAL a WAL server left holds records: naming
    that table would make the records its (a later WAL start on theirs refused, on this one
    skipped as committed)."""
    wal_binding.bind(tmp_path, X, "c1")
    wal_binding.name(tmp_path, Y, wal_holds_records=True)
    assert wal_binding.bound_table(tmp_path) == X
    (tmp_path / "wal-table").unlink()  # (a data dir from before the file: the records' table unknown)
    wal_binding.name(tmp_path, Y, wal_holds_records=True)
    assert wal_binding.bound_table(tmp_path) is None


def test_no_table_is_made_where_a_wals_records_cannot_be_its(tmp_path: Path) -> None:
    wal_binding.check_creatable(tmp_path, X.uri, 0, (0, 0))  # (a new data dir: a new table)
    with pytest.raises(
        WalOfAnotherTable, match=r"acknowledged for another table .* names s3://bucket/x/streams, where"
    ):
        wal_binding.check_creatable(tmp_path, X.uri, 2, (4, 5))  # (a data dir from before the file)
    wal_binding.bind(tmp_path, X, "c1")
    with pytest.raises(
        WalOfAnotherTable, match=r"\(id id-x\), but --storage-uri names s3://bucket/y/streams, where no"
    ):
        wal_binding.check_creatable(tmp_path, Y.uri, 2, (4, 5))
    with pytest.raises(TableGone):
        wal_binding.check_creatable(tmp_path, X.uri, 0, (0, 0))
    wal_binding.check_creatable(tmp_path, Y.uri, 0, (0, 0))  # (an empty WAL moves to a new table)
