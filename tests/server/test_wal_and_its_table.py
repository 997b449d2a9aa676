"""A data directory's WAL and the table it is for (``storage/wal_binding.py``): real processes,
local tables.

A server restarted after a crash with another ``--storage-uri`` than the one it ran with (a
forgotten flag, a variable this shell does not set) holds, in its WAL, appends acknowledged for
the first table and not yet flushed: replayed into the other table, the first would never get
them, and its streams would go on from older tails. A table restored from an older copy misses
records its WAL let go once they were committed to it. Each start is refused before it claims
anything, and the right table still gets every acknowledged append.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import requests
from servers import ServerProcess, numbered_stream, numbers, refused_start

pytestmark = pytest.mark.slow

JSON = {"Content-Type": "application/json"}
HOLD = ["--flush-interval-ms", "600000"]  # (acknowledged appends stay in the WAL only)


def _crash_after_appends(data_dir: Path, table: Path, stream: str, count: int) -> None:
    """A server on ``table`` acknowledges a new stream and ``count`` appends, then is killed."""
    server = ServerProcess(data_dir, ["--storage-uri", str(table), *HOLD]).start()
    try:
        numbered_stream(server, stream, count)
    finally:
        server.kill()


def _refused(data_dir: Path, table: Path) -> str:
    """The log of a start on ``table``, which must be refused."""
    return refused_start(ServerProcess(data_dir, ["--storage-uri", str(table)]))


def test_a_restart_on_a_table_no_server_wrote_is_refused(tmp_path: Path) -> None:
    data_dir, right, wrong = tmp_path / "data", tmp_path / "right", tmp_path / "wrong"
    _crash_after_appends(data_dir, right, "s", 5)
    log = _refused(data_dir, wrong)
    assert f"acknowledged for the table at {right}/streams (id " in log and f"{wrong}/streams, where no table is" in log
    assert not wrong.exists()  # (no table made where the records cannot go)
    server = ServerProcess(data_dir, ["--storage-uri", str(right)]).start()
    try:
        assert numbers(server, "s") == list(range(5))
    finally:
        server.kill()


def test_a_restart_on_another_table_this_node_owned_is_refused(tmp_path: Path) -> None:
    """The same data dir ran on another table before (its node id owns that one too): by
    ownership alone a restart there is this node's restart, and the WAL its records'."""
    data_dir, first, second = tmp_path / "data", tmp_path / "first", tmp_path / "second"
    before = ServerProcess(data_dir, ["--storage-uri", str(first)]).start()
    try:
        assert requests.put(before.stream_url("old"), headers=JSON, timeout=30).status_code == 201
    finally:
        before.stop()  # (a clean stop: flushed, the WAL empty)
    _crash_after_appends(data_dir, second, "new", 3)
    log = _refused(data_dir, first)
    assert f"acknowledged for the table at {second}/streams (id " in log and "no server has written" not in log
    server = ServerProcess(data_dir, ["--storage-uri", str(second)]).start()
    try:
        assert numbers(server, "new") == list(range(3))
        assert requests.head(server.stream_url("old"), timeout=30).status_code == 404  # (the other table's)
    finally:
        server.kill()


def test_a_table_restored_from_before_records_the_wal_let_go_is_refused(tmp_path: Path) -> None:
    data_dir, table = tmp_path / "data", tmp_path / "table"
    server = ServerProcess(data_dir, ["--storage-uri", str(table)]).start()
    try:
        assert requests.put(server.stream_url("s"), headers=JSON, timeout=30).status_code == 201
        server.stop()  # (flushed: the WAL let its records go)
        shutil.copytree(table, tmp_path / "backup")
        server.start()
        for n in range(4):
            assert requests.post(server.stream_url("s"), data=b'{"n": %d}' % n, headers=JSON, timeout=30).ok
    finally:
        server.stop()
    shutil.rmtree(table)
    shutil.copytree(tmp_path / "backup", table)  # (the table as it was before the appends)
    assert "were committed to this table and are not in it now" in _refused(data_dir, table)


def test_a_start_refused_by_another_tables_owner_leaves_the_data_dir_as_it_was(tmp_path: Path) -> None:
    """A data dir that ran on one table, started on another that a server owns: refused (that
    owner serves it), and the data dir still knows its WAL as the first table's, so once the
    owner has let go the same start takes the table, its WAL's leftover LSNs not mistaken for
    this table's."""
    data_dir, first, second = tmp_path / "data", tmp_path / "first", tmp_path / "second"
    before = ServerProcess(data_dir, ["--storage-uri", str(first)]).start()
    try:
        numbered_stream(before, "a", 20)
    finally:
        before.stop()  # (its WAL's empty segment is named past the other table's LSNs)
    owner = ServerProcess(tmp_path / "owner", ["--storage-uri", str(second)]).start()
    try:
        assert requests.put(owner.stream_url("b"), headers=JSON, timeout=30).status_code == 201
        assert "has not released it" in refused_start(ServerProcess(data_dir, ["--storage-uri", str(second)]))
    finally:
        owner.stop()  # (a clean stop lets the table go)
    server = ServerProcess(data_dir, ["--storage-uri", str(second)]).start()
    try:
        assert requests.head(server.stream_url("b"), timeout=30).status_code == 200
        assert requests.post(server.stream_url("b"), data=b'{"n": 0}', headers=JSON, timeout=30).ok
        assert numbers(server, "b") == [0]
    finally:
        server.kill()


@pytest.mark.parametrize("other_appends", [30, 0], ids=["other-committed-past-them", "other-new"])
def test_a_delta_start_on_another_table_leaves_the_wal_to_its_own(tmp_path: Path, other_appends: int) -> None:
    """A WAL server crashed with acknowledged records in its WAL, then its data dir started with
    ``--durability delta`` on another table: they are not that table's to drop or give up, whether
    it is committed past their LSNs or new (it used to refuse the start, and ``--take-over force``
    would have given them up). The data dir still names the WAL's table, and a WAL start on it
    replays every record."""
    data_dir, first, other = tmp_path / "data", tmp_path / "first", tmp_path / "other"
    elsewhere = ServerProcess(tmp_path / "elsewhere", ["--storage-uri", str(other)]).start()
    try:
        numbered_stream(elsewhere, "o", other_appends)
    finally:
        elsewhere.stop()
    _crash_after_appends(data_dir, first, "s", 5)
    delta = ServerProcess(data_dir, ["--storage-uri", str(other), "--durability", "delta"]).start()
    try:
        assert numbers(delta, "o") == list(range(other_appends))
    finally:
        delta.stop()
    server = ServerProcess(data_dir, ["--storage-uri", str(first)]).start()
    try:
        assert numbers(server, "s") == list(range(5))
    finally:
        server.kill()
