"""Copies of a data directory (a cloned disk or machine image, a restored backup, ``cp -a``):
real processes on one local table.

A copy carries the node id and the WAL id by which ownership knows a restart, so each copy was
taken for the directory restarting: a copy that ran claimed the table and acknowledged appends
its original's WAL never saw, and the original, started again, went on from its own WAL under
the same offsets, or fenced a twin that was serving. Now each data directory keeps the ids of
the claims it made (``storage/wal_binding.py``, ``ownership.copy_of``): a copy that did not
make the table's newest claim is refused, naming the one that did, and nothing acknowledged by
either is lost.
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


def _append(server: ServerProcess, *values: int) -> None:
    for n in values:
        answer = requests.post(server.stream_url("s"), data=b'{"n": %d}' % n, headers=JSON, timeout=30)
        assert answer.status_code in (200, 204), answer.text


def _values(server: ServerProcess) -> list[int]:
    return [item["n"] for item in read_json(server.stream_url("s"))]


def test_the_original_of_a_copy_that_ran_isrefused_start(tmp_path: Path) -> None:
    table = ["--storage-uri", str(tmp_path / "table"), *HOLD]
    original = ServerProcess(tmp_path / "original", table).start()
    try:
        assert requests.put(original.stream_url("s"), headers=JSON, timeout=30).status_code == 201
        _append(original, 0, 1)
    finally:
        original.kill()
    shutil.copytree(tmp_path / "original", tmp_path / "copy")  # (after the crash: both hold 0 and 1)
    copy = ServerProcess(tmp_path / "copy", table).start()
    try:
        _append(copy, 2)  # (offset 2: the original's WAL knows nothing of it)
    finally:
        copy.kill()
    log = refused_start(ServerProcess(tmp_path / "original", table))
    assert "was claimed by another copy of this data dir" in log and f"data dir {tmp_path / 'copy'}, " in log
    copy.start()
    try:
        assert _values(copy) == [0, 1, 2]
        _append(copy, 3)
        assert _values(copy) == [0, 1, 2, 3]
    finally:
        copy.kill()


def test_a_twin_of_a_cloned_image_is_refused_while_the_other_serves(tmp_path: Path) -> None:
    table = ["--storage-uri", str(tmp_path / "table")]
    image = ServerProcess(tmp_path / "image", table).start()
    image.stop()  # (a clean stop: the image's WAL is empty, the table released)
    shutil.copytree(tmp_path / "image", tmp_path / "vm1")
    shutil.copytree(tmp_path / "image", tmp_path / "vm2")
    vm1 = ServerProcess(tmp_path / "vm1", [*table, *HOLD]).start()
    vm2 = ServerProcess(tmp_path / "vm2", table)
    try:
        assert requests.put(vm1.stream_url("s"), headers=JSON, timeout=30).status_code == 201
        _append(vm1, 0, 1, 2)
        log = refused_start(vm2)
        assert "was claimed by another copy of this data dir" in log and f"data dir {tmp_path / 'vm1'}, " in log
        _append(vm1, 3)  # (vm1 serves on: nothing fenced it)
        assert _values(vm1) == [0, 1, 2, 3]
        vm2.extra_args = [*table, "--take-over", "ask"]  # (the operator's way to move it: vm1 hands over)
        vm2.start()
        assert _values(vm2) == [0, 1, 2, 3]
        refused = requests.post(vm1.stream_url("s"), data=b'{"n": 4}', headers=JSON, timeout=30)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "NOT_OWNER"
    finally:
        vm2.kill()
        vm1.kill()


def test_a_copy_started_beside_its_running_original_is_refused(tmp_path: Path) -> None:
    """``cp -a`` of a serving server's data dir, started on the same host and storage: by its ids
    the copy is the original restarting. The original's data dir lock, held, says it is not."""
    table = ["--storage-uri", str(tmp_path / "table"), *HOLD]
    original = ServerProcess(tmp_path / "original", table).start()
    copy = ServerProcess(tmp_path / "copy", table)
    try:
        assert requests.put(original.stream_url("s"), headers=JSON, timeout=30).status_code == 201
        _append(original, 0, 1)
        shutil.copytree(tmp_path / "original", tmp_path / "copy")
        _append(original, 2)  # (acknowledged after the copy was made: in the original's WAL only)
        log = refused_start(copy)
        assert f"data dir {tmp_path / 'original'}, " in log and "runs on this host from another copy" in log
        _append(original, 3)  # (the original serves on: nothing fenced it)
        assert _values(original) == [0, 1, 2, 3]
        original.stop()
        original.start()  # (and its restart is its own)
        assert _values(original) == [0, 1, 2, 3]
    finally:
        copy.kill()
        original.kill()
