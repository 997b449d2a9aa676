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
from servers import ServerProcess, read_json, refused_start

pytestmark = pytest.mark.slow

JSON = {"Content-Type": "application/json"}
HOLD = ["--flush-interval-ms", "600000"]  # (acknowledged appends stay in the WAL only)


def _crash_after_appends(data_dir: Path, table: Path, stream: str, count: int) -> None:
    """A server on ``table`` acknowledges a new stream and ``count`` appends, then is killed."""
    server = ServerProcess(data_dir, ["--storage-uri", str(table), *HOLD]).start()
    try:
        assert requests.put(server.stream_url(stream), headers=JSON, timeout=30).status_code == 201
        for n in range(count):
            assert requests.post(server.stream_url(stream), data=b'{"n": %d}' % n, headers=JSON, timeout=30).ok
    finally:
        server.kill()


def _refused(data_dir: Path, table: Path) -> str:
    """The log of a start on ``table``, which must be refused."""
    return refused_start(ServerProcess(data_dir, ["--storage-uri", str(table)]))


def test_a_restart_on_a_table_no_server_wrote_is_refused(tmp_path: Path) -> None:
    data_dir, right, wrong = tmp_path / "data", tmp_path / "right", tmp_path / "wrong"
    _crash_after_appends(data_dir, right, "s", 5)
    log = _refused(data_dir, wrong)
    assert f"acknowledged for the table at {right}/streams (id " in log and "which no server has written yet" in log
    server = ServerProcess(data_dir, ["--storage-uri", str(right)]).start()
    try:
        assert [item["n"] for item in read_json(server.stream_url("s"))] == list(range(5))
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
        assert [item["n"] for item in read_json(server.stream_url("new"))] == list(range(3))
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
