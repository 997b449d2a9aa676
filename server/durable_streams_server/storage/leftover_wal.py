"""A write-ahead log a start would leave behind: the start is refused, or the log given up.

A server started with ``--durability delta`` has no WAL: nothing reads ``<data-dir>/wal``. If a
WAL server used that data dir before and stopped without flushing (``kill -9``, a failed disk
write, a store outage), its WAL holds records it acknowledged that Delta does not hold, stream
creations among them: a start without the WAL would drop them silently (their streams answer
404). So such a start is refused (``WalLeftBehind``), naming the records, the data dir and the
two ways out:

* start with ``--durability wal`` on that data dir: recovery replays the records and the
  flusher commits them (a clean stop flushes everything), then start with ``--durability delta``;
* give them up with ``--take-over force``, an option of that one start and never written
  anywhere: the log is moved aside (``wal.given-up-<UTC time>``, kept for whoever wants to read
  it) and the start logs what it gave up. Moved, because a later WAL start must never replay
  it: the commits of the delta server take the same LSNs again.

Records at or below the LSN Delta holds are there already (a flush whose segments were not yet
deleted): nothing is at risk, and the log is left as it is. So are the records of a WAL that
another table's server left (``wal_binding.wal_is_for``: the data dir names that table): they
are not this table's to drop or give up, and wait for a WAL start on theirs. The other way
round needs nothing: a delta server acknowledges after the commit, so a WAL server on its data
dir finds everything in Delta.

Reading the log here changes nothing (a refused start leaves the data dir as it found it): the
segments are decoded as they are, a torn tail ends a segment as in ``WriteAheadLog.replay``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from .local_sync import fsync_path
from .ownership import OwnershipError
from .records import decode_frames

log = logging.getLogger("durable_streams_server.storage")

WAL_DIR = "wal"
_SEGMENTS = "*.wal"


class WalLeftBehind(OwnershipError):
    """The start would drop acknowledged records the data dir's WAL holds: refused."""


@dataclass(frozen=True, slots=True)
class LeftoverWal:
    directory: Path
    records: int
    segments: int
    first_lsn: int
    last_lsn: int

    def describe(self) -> str:
        return (
            f"{self.records} acknowledged records (LSN {self.first_lsn} to {self.last_lsn}; WAL segments: "
            f"{self.segments}, in {self.directory})"
        )


def unflushed(data_dir: Path, committed_lsn: int) -> LeftoverWal | None:
    """The records of ``data_dir``'s WAL after ``committed_lsn`` (``None``: there are none)."""
    directory = (data_dir / WAL_DIR).resolve()
    lsns: list[int] = []
    segments = 0
    for path in sorted(directory.glob(_SEGMENTS)) if directory.is_dir() else []:
        found = [record.lsn for record, _ in decode_frames(path.read_bytes()) if record.lsn > committed_lsn]
        segments += bool(found)
        lsns += found
    return LeftoverWal(directory, len(lsns), segments, min(lsns), max(lsns)) if lsns else None


def refusal(leftover: LeftoverWal, storage_uri: str) -> WalLeftBehind:
    return WalLeftBehind(
        f"refusing to start with --durability delta: the write-ahead log holds {leftover.describe()} that are "
        f"not in Delta ({storage_uri}), and a start without it would drop them. Start with --durability wal "
        "on this data dir to replay and flush them (then start with --durability delta), or start with "
        "--take-over force to give them up for this start (the log is moved aside, never replayed)."
    )


def give_up(leftover: LeftoverWal) -> Path:
    """Move the log aside for good (an explicit ``--take-over force``), and say so."""
    aside = leftover.directory.with_name(f"{WAL_DIR}.given-up-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    os.replace(leftover.directory, aside)
    fsync_path(aside.parent)
    log.warning(
        "gave up the write-ahead log (--take-over force): its acknowledged records are not in Delta",
        extra={
            "records": leftover.records,
            "segments": leftover.segments,
            "lsn_from": leftover.first_lsn,
            "lsn_to": leftover.last_lsn,
            "moved_to": str(aside),
        },
    )
    return aside
