"""The Delta log stays at two checkpoints and the commits after them, whatever the number of
commits, and the table (state, transaction versions, stale handles) reads the same afterwards."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from durable_streams_server.storage.delta_log import APP_ID, DeltaLog

INTERVAL = 10


def _state(uid: int, tail: int) -> dict[str, Any]:
    return {"name": f"v1/stream/s{uid}", "uid": uid, "tail": tail, "written_ms": 1000 + tail}


def _log_versions(tmp_path: Path) -> tuple[list[int], list[int]]:
    """Versions of the commit files and of the checkpoints in ``_delta_log``."""
    names = os.listdir(tmp_path / "streams" / "_delta_log")
    commits = sorted(int(name[:20]) for name in names if re.fullmatch(r"\d{20}\.json", name))
    checkpoints = sorted(int(name[:20]) for name in names if name.endswith(".checkpoint.parquet"))
    return commits, checkpoints


def test_the_writer_trims_the_log_to_two_checkpoints_after_each_log_checkpoint(tmp_path: Path) -> None:
    delta = DeltaLog(str(tmp_path), {}, checkpoint_interval=INTERVAL)
    early = DeltaTable(delta.uri)  # a reader's handle, left behind by every trim
    for lsn in range(1, 96):
        delta.commit([], {lsn % 3 + 1: _state(lsn % 3 + 1, lsn)}, lsn)
        commits, checkpoints = _log_versions(tmp_path)
        assert len(commits) <= 2 * INTERVAL + 1, (lsn, commits)
    commits, checkpoints = _log_versions(tmp_path)
    assert checkpoints == [79, 89]
    assert commits[0] == 79 and commits[-1] == delta._table.version()

    fresh = DeltaTable(delta.uri)
    assert fresh.version() == delta._table.version()
    assert fresh.transaction_version(APP_ID) == 95
    early.update_incremental()
    assert early.version() == fresh.version()
    states = delta.load_states()
    assert {uid: state["tail"] for uid, state in states.items()} == {1: 93, 2: 94, 3: 95}
    reopened = DeltaLog(str(tmp_path), {}, checkpoint_interval=INTERVAL)
    assert reopened.committed_lsn() == 95


def test_a_retention_period_keeps_younger_entries(tmp_path: Path) -> None:
    delta = DeltaLog(str(tmp_path), {}, checkpoint_interval=INTERVAL, log_retention_hours=1)
    for lsn in range(1, 46):
        delta.commit([], {1: _state(1, lsn)}, lsn)
    commits, checkpoints = _log_versions(tmp_path)
    assert commits == list(range(46)) and checkpoints == [9, 19, 29, 39]
    assert DeltaTable(delta.uri).transaction_version(APP_ID) == 45
