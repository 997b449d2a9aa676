"""Making a local table's commits durable: fsync what each Delta commit wrote.

delta-rs writes a local table through object_store's ``LocalFileSystem``, which writes
files and renames them into place but never fsyncs them. After a commit returns, its data
files and its log entry are in the page cache only: a ``kill -9`` of the server loses
nothing (the kernel still writes them out), but an OS crash or a power loss within the
write-back window (~30 s) may. The WAL was made durable with ``RWF_DSYNC``, and the flusher
deletes its segments once Delta holds their records; without this module those records
would, for those seconds, be durable nowhere. In delta mode a record is acknowledged when
its commit returns, so the same gap would hold acknowledged records directly.

So ``DeltaLog`` calls ``LocalSync.commit_made`` after every commit through its handle
(flushes, compaction rewrites and purges, state checkpoints) and before returning. It
fsyncs, for each version since the last call: the data files the version's log entry adds,
the log entry, the log checkpoint delta-rs wrote after it (and ``_last_checkpoint``), then
the directories that gained names (``_delta_log``, the table's, any partition's). Only then
may the flusher drop WAL segments or acknowledge a delta-mode record.

What stays open: delta-rs renames the log entry into place right after writing the data
files, and this runs right after that. A power loss in those milliseconds could find the
log entry on disk and a data file not. Closing it would mean writing the data files
ourselves, syncing them, and committing their ``add`` actions; the WAL still holds every
record of such a commit (it is dropped only after the sync), so recovery could then redo it.

On opening a table, ``LocalSync.opened`` fsyncs the versions since the newest log checkpoint
(at most ``delta.checkpointInterval`` of them): a server killed between a commit and its
sync leaves that commit in the page cache only, and its WAL segments are dropped after the
next commit of the new server. (Older versions were synced by the server that made them.)
It also checks that each data file those versions added, and the table still uses, is there
at the size its ``add`` action states: a file lost or cut short by a crash in the window
above is an error at start (``TornCommit``), never a gap a reader finds later; nothing is
changed (the WAL still holds a flush's records then; a compaction's replaced files are still
on disk until vacuum).

Object stores (``s3://``, ``az://``, ``gs://`` ...) have made a write durable when they
acknowledge it: ``for_uri`` gives ``None`` for them, and nothing is synced.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from pathlib import Path
from urllib.parse import unquote, urlparse

import orjson

LOG_DIR = "_delta_log"


class TornCommit(RuntimeError):
    """A data file the table uses is missing or shorter than its commit says."""


class LocalSync:
    """fsyncs the files of a local Delta table's new versions (see the module docstring)."""

    def __init__(self, table_dir: Path) -> None:
        self.table_dir = table_dir
        self.log_dir = table_dir / LOG_DIR
        self.synced_version = -1
        """The newest version whose files are synced."""
        self.failure: OSError | None = None
        """The first failed sync: it fails every later one (see ``commit_made``)."""

    @classmethod
    def for_uri(cls, table_uri: str) -> LocalSync | None:
        """A ``LocalSync`` for a table on a local file system; ``None`` for an object store."""
        parsed = urlparse(table_uri)
        if parsed.scheme == "file":
            return cls(Path(unquote(parsed.path)))
        if parsed.scheme == "":
            return cls(Path(table_uri))
        return None

    def opened(self, version: int, active: Collection[str]) -> None:
        """Sync the versions since the newest log checkpoint, up to ``version`` (the table's
        current one), as the last server may have been killed before syncing them; the data
        files they added that are still ``active`` (the table's, by the paths of their ``add``
        actions) must be whole (``TornCommit``). Others may be gone: removed by a later
        version, and vacuumed."""
        self.synced_version = _last_checkpoint_version(self.log_dir) - 1
        self._sync_through(version, {unquote(path) for path in active})

    def commit_made(self, version: int) -> None:
        """Sync every version after the last synced one up to ``version`` (see the module
        docstring). ``OSError`` if a file cannot be synced: the commit is then not durable,
        and nor is any later one, since Linux may mark the pages of a failed fsync clean
        (a retried fsync succeeds without writing them): the failure sticks, the flusher
        keeps retrying and the WAL keeps its records, as while an object store is down."""
        if self.failure is not None:
            raise OSError(f"an fsync of the Delta table failed earlier ({self.failure}); restart the server")
        try:
            self._sync_through(version, None)
        except OSError as error:
            self.failure = error
            raise

    def _sync_through(self, version: int, active: Collection[str] | None) -> None:
        """``active``: check the files against it (``opened``); ``None``: all must be there."""
        if version <= self.synced_version:
            return
        directories = {self.log_dir, self.table_dir}
        for each in range(max(self.synced_version + 1, 0), version + 1):
            entry = self.log_dir / f"{each:020d}.json"
            if entry.exists():  # (else trimmed already, ``log_trim``: its files were synced by its maker)
                for relative, size in _added_files(entry):
                    path = self.table_dir / relative
                    if active is not None:
                        if relative not in active:
                            continue  # (removed by a later version)
                        _check_whole(path, size, each)
                    fsync_path(path)
                    directories.add(path.parent)
                fsync_path(entry)
            checkpoint = self.log_dir / f"{each:020d}.checkpoint.parquet"
            if checkpoint.exists():
                fsync_path(checkpoint)
                last = self.log_dir / "_last_checkpoint"
                if last.exists():
                    fsync_path(last)
        for directory in sorted(directories, key=lambda path: len(path.parts), reverse=True):
            fsync_path(directory)
        self.synced_version = version


def _added_files(entry: Path) -> Iterator[tuple[str, int]]:
    """The (decoded, table-relative) paths of the data files a log entry adds, and their sizes."""
    with entry.open("rb") as lines:
        for line in lines:
            if line.startswith(b'{"add"'):
                add = orjson.loads(line)["add"]
                yield unquote(add["path"]), int(add["size"])


def _check_whole(path: Path, size: int, version: int) -> None:
    try:
        found = path.stat().st_size
    except FileNotFoundError:
        found = None
    if found != size:
        state = "missing" if found is None else f"{found:,} bytes"
        raise TornCommit(
            f"Delta commit {version} of {path.parent} uses {path.name}, of {size:,} bytes, which is {state}: "
            "the table lost data in a crash before the commit was synced, and the server does not start on it. "
            "Keep the WAL directory and the table's files as they are: the WAL holds a flush's records until its "
            "commit is synced, and the files a compaction rewrote stay on disk until vacuumed."
        )


def _last_checkpoint_version(log_dir: Path) -> int:
    try:
        return int(orjson.loads((log_dir / "_last_checkpoint").read_bytes())["version"])
    except FileNotFoundError:
        return -1


def fsync_path(path: Path) -> None:
    """fsync a file or a directory by its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(path: Path, text: str) -> None:
    """``path`` holds ``text`` from now on, whatever crash comes: written beside it, fsynced,
    renamed over it, and its directory fsynced."""
    partial = path.with_suffix(".tmp")
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)
    fsync_path(path.parent)
