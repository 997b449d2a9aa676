"""One server per data directory: an exclusive lock, held as long as the server's storage.

Storage decision
----------------
A data directory holds what one process alone may write: the write-ahead log (its segments
and the LSNs it hands out), and the ids that make a start *the same node* (``node-id``,
``wal-id``: ``ownership``). A second server started on it by mistake (``make serve`` twice,
another ``--port``, a supervisor that starts the new process before the old one exited) has
the old one's node id and WAL id, so ownership takes it for a restart and lets it claim the
storage back (``ownership.restart_of``): it would replay the WAL while the first still appends
to it, hand out the LSNs the first hands out, fence the first, and acknowledged records of
the first written after that replay would be in no server's memory. Ownership cannot tell a
restart from a second process: both are the same node on the same directory.

So before anything in the directory is read or written, a server takes an exclusive,
non-blocking ``flock`` on ``<data dir>/lock`` and keeps the file open until its storage is
closed. The kernel drops the lock however the process ends (``kill -9``, an OS crash: the
lock is not on disk), so a restart never finds a stale one, and a lock held is a live process
holding it. A second server is refused at once (``DataDirInUse``, exit before serving),
naming the holder the file describes (pid, host, start time: written once the lock is held,
read only for the message; the lock is the ``flock``, not the file or its text).

The lock also tells a *copy* of a data directory from its original on one host (``cp -a`` of
a serving server's directory, started on the same storage): by its ids the copy is the
original restarting, but the directory the owner ran from is in use (``running_copy``, a probe
of that directory's lock before a claim that would be a restart).

``flock`` locks are per open file, so a second open in the same process is refused too (a
server started twice in one process). On NFS, Linux turns ``flock`` into a POSIX lock the
server enforces; a file system without locks refuses the ``flock`` (``ENOLCK``), which is
reported rather than ignored: a data directory is meant to be a local disk.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from .durability import Durability
from .ownership import Node, Owner, OwnershipError

LOCK_FILE = "lock"
"""In the data directory: the file a server holds its ``flock`` on."""


class DataDirInUse(OwnershipError):
    """Another live process holds the data directory: this start is refused."""


class DataDirLock:
    """The held lock of one data directory (``acquire``); ``release`` lets it go."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: Path) -> DataDirLock:
        """Hold ``data_dir``'s lock, or raise ``DataDirInUse`` naming who holds it."""
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = _read(fd)
            os.close(fd)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise _in_use(data_dir, holder) from None
            raise DataDirInUse(f"cannot lock the data dir {data_dir} ({path}: {error.strerror})") from None
        try:
            os.ftruncate(fd, 0)
            holder_text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": _now()})
            os.pwrite(fd, (holder_text + "\n").encode(), 0)
        except BaseException:
            os.close(fd)  # (and the lock with it)
            raise
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Let the lock go (closing the file drops it); again: nothing."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def held(data_dir: Path) -> bool:
    """Whether a live process holds ``data_dir``'s lock (a probe: a shared lock taken and let go
    at once; nothing is created where there is no lock file)."""
    try:
        fd = os.open(data_dir / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
        return error.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)
    return False


def running_copy(node: Node, owner: Owner) -> DataDirInUse | None:
    """The refusal of ``node``'s start if ``owner`` is a server on this host running from another
    data dir with ``node``'s id (a copy of it, or its original: ``cp -a``): by its ids the start
    would be taken for that server restarting and fence it, whose acknowledgements not yet in
    Delta would then be in no server's memory. ``None``: no such server runs here."""
    if (
        owner.node_id != node.node_id
        or owner.durability != Durability.WAL  # (fenced, a delta owner loses nothing acknowledged)
        or owner.state == "released"
        or owner.host != socket.gethostname()
        or not owner.data_dir
        or _same_directory(owner.data_dir, node.data_dir)
        or not held(Path(owner.data_dir))
    ):
        return None
    return DataDirInUse(
        f"{owner.describe()} runs on this host from another copy of this data dir ({node.data_dir}: "
        "the same node id): started, this one would be taken for it restarting and fence it, losing what "
        "it acknowledged and has not flushed. Nothing was changed. Stop that server first, or start this "
        "one with a fresh --data-dir (and --take-over to move the storage to it)."
    )


def _same_directory(one: str, other: str) -> bool:
    """Whether two paths name one directory (a bind mount, another spelling: its device and inode)."""
    try:
        first, second = os.stat(one), os.stat(other)
    except OSError:
        return one == other
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def _in_use(data_dir: Path, holder: dict[str, object]) -> DataDirInUse:
    who = ", ".join(f"{key} {holder[key]}" for key in ("pid", "host", "since") if key in holder)
    return DataDirInUse(
        f"the data dir {data_dir} is in use by another server ({who or 'its process unknown'}): a data dir "
        "holds one server's write-ahead log, and two servers on it would write one log. Nothing was "
        "changed. Stop that server first (a restart on the same data dir takes its storage back), or "
        "give this one a --data-dir of its own."
    )


def _read(fd: int) -> dict[str, object]:
    """What the holder wrote in the lock file (empty if it is unreadable or not written yet)."""
    try:
        found = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
