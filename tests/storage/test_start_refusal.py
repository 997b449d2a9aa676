"""A shard server's refused start leaves its reason in its data directory for its node
(``storage.start_refusal``): read back by the refusing process's pid only, and never an error
of its own. The whole path (a real node, a shard whose table is missing) is in
``tests/cluster/test_shard_tables.py``."""

from __future__ import annotations

import os
from pathlib import Path

from durable_streams_server.storage import start_refusal


def test_a_refusal_is_read_back_by_the_pid_that_wrote_it_until_a_start_clears_it(tmp_path: Path) -> None:
    assert start_refusal.reason_of(tmp_path, os.getpid()) is None  # (no file)
    start_refusal.note(tmp_path, "the table is not there")
    assert start_refusal.reason_of(tmp_path, os.getpid()) == "the table is not there"
    assert start_refusal.reason_of(tmp_path, os.getpid() + 1) is None  # (another process's start: not its reason)
    assert [path.name for path in tmp_path.iterdir()] == [start_refusal.FILE]  # (no temporary file left)
    start_refusal.clear(tmp_path)
    assert start_refusal.reason_of(tmp_path, os.getpid()) is None
    start_refusal.clear(tmp_path)  # (nothing to clear: no error)


def test_a_torn_or_foreign_file_explains_nothing_and_a_missing_directory_is_no_error(tmp_path: Path) -> None:
    (tmp_path / start_refusal.FILE).write_text('{"pid": ', encoding="utf-8")
    assert start_refusal.reason_of(tmp_path, os.getpid()) is None
    (tmp_path / start_refusal.FILE).write_text(f'{{"pid": {os.getpid()}, "reason": 3}}', encoding="utf-8")
    assert start_refusal.reason_of(tmp_path, os.getpid()) is None
    start_refusal.note(tmp_path / "missing", "refused")  # (the explanation is lost, not the refusal's outcome)
    assert not (tmp_path / "missing").exists()
    (tmp_path / start_refusal.FILE).unlink()
    (tmp_path / start_refusal.FILE).mkdir()  # (cannot be replaced: nothing written, nothing left behind)
    start_refusal.note(tmp_path, "refused")
    assert [path.name for path in tmp_path.iterdir()] == [start_refusal.FILE]
    assert start_refusal.reason_of(tmp_path, os.getpid()) is None
