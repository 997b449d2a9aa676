"""Write admission and health: whether storage can make a write durable soon, and why not.

These conditions refuse writes, each with its own code and a retry delay:

* ``STORAGE_FAILED``: a WAL write or fsync failed (local disk). Memory may be ahead of
  the WAL, so nothing is acknowledged any more until a restart (``fail``).
* ``DELTA_UNAVAILABLE`` (delta mode): Delta commits are failing; a write could only be
  acknowledged by a commit, so it is refused up-front until one succeeds.
* ``WAL_FULL`` (WAL mode): Delta commits fail or lag and the WAL holds more than
  ``max_wal_bytes``.
* ``OWNER_MOVING``: another node asked this one to hand the storage over; what was
  submitted is being flushed (``owner_watch``).
* ``NOT_OWNER``: this server no longer owns its storage (handed over, or fenced by a newer
  owner: ``ownership``); nothing is acknowledged any more, waiting requests included.

``check_writable`` runs before the engine validates or changes anything, so a refused
write leaves memory untouched; it is O(1) because it runs on every write (the WAL keeps a
running byte count). A refusal is a ``ServiceUnavailable`` carrying ``retry_after_s``: the
flusher's current backoff (when its next commit attempt is due), or 5 s after a fatal
failure. Storage never renders HTTP: the http layer turns ``retry_after_s`` into
``Retry-After``. ``degraded`` says the same in words, for ``/readyz`` and metrics.
"""

from __future__ import annotations

import logging
import math
import time
from datetime import UTC, datetime

from ..protocol.errors import ServiceUnavailable
from .ownership import OwnershipError
from .wal import WriteAheadLog

log = logging.getLogger("durable_streams_server.storage")

IN_DOUBT = (
    "the Delta commit of this write failed; it stays queued and may still become durable "
    "(an idempotent producer can safely retry the same request)"
)
_FATAL_RETRY_AFTER_S = 5


class Admission:
    def __init__(self, wal: WriteAheadLog | None, max_wal_bytes: int) -> None:
        self._wal = wal
        self._max_wal_bytes = max_wal_bytes
        self.failure: BaseException | None = None
        """The WAL failure that stopped acknowledgements (until a restart)."""
        self.commit_error: tuple[float, str] | None = None
        """(since when, latest error) while Delta commits fail."""
        self.retry_delay = 0.0
        """The flusher's current backoff between commit attempts (0: not retrying)."""
        self.moving = False
        """A handover was asked for: new writes are refused while the rest is flushed."""
        self.fenced: OwnershipError | None = None
        """Why this server may no longer write its storage (for good)."""

    # -- state changes (by the WAL writer and the flusher) ------------------------------

    def fail(self, error: BaseException) -> None:
        """Stop acknowledging: memory may now be ahead of what is durable."""
        log.critical("storage failure; refusing writes until restart", exc_info=error)
        self.failure = error

    def fence(self, error: OwnershipError) -> None:
        if self.fenced is None:
            log.critical("no longer the owner of the storage; refusing writes", extra={"reason": str(error)})
            self.fenced = error

    def commit_failed(self, error: Exception, lsn: int) -> None:
        if self.commit_error is None:
            log.error("delta commit failed; retrying until it succeeds", extra={"lsn": lsn, "error": str(error)})
            self.commit_error = (time.time(), str(error))
        else:
            log.warning("delta commit failed again", extra={"lsn": lsn, "error": str(error)})
            self.commit_error = (self.commit_error[0], str(error))

    def commit_succeeded(self, lsn: int) -> None:
        if self.commit_error is not None:
            since = _iso(self.commit_error[0])
            log.warning("delta commits succeed again", extra={"lsn": lsn, "failing_since": since})
            self.commit_error = None

    # -- questions ----------------------------------------------------------------------

    @property
    def degraded(self) -> str | None:
        """Why storage cannot make progress now; ``None`` when it is healthy."""
        if self.failure is not None:
            return f"storage failed, writes refused until restart: {self.failure}"
        if self.fenced is not None:
            return str(self.fenced)
        if self.moving:
            return "handing the storage over to another node"
        failing = None
        if self.commit_error is not None:
            since, error = self.commit_error
            failing = f"delta commits failing since {_iso(since)}: {error}"
        if self.wal_full():
            cap = f"WAL over its {_size_text(self._max_wal_bytes)} cap"
            return f"{cap} ({failing})" if failing else cap
        return failing

    def wal_full(self) -> bool:
        return self._wal is not None and self._wal.size_bytes() > self._max_wal_bytes

    def check_writable(self) -> None:
        """Refuse a write up-front while storage could not make it durable soon."""
        if self.failure is not None:
            raise self.unavailable("STORAGE_FAILED")
        if self.fenced is not None:
            raise self.unavailable("NOT_OWNER")
        if self.moving:
            raise self.unavailable("OWNER_MOVING")
        if self._wal is None and self.commit_error is not None:
            raise self.unavailable("DELTA_UNAVAILABLE")
        if self.wal_full():
            raise self.unavailable("WAL_FULL")

    def check_acknowledgeable(self) -> None:
        """Refuse to wait for durability that cannot come (or cannot be known) soon."""
        if self.failure is not None:
            raise self.unavailable("STORAGE_FAILED")
        if self.fenced is not None:
            raise self.unavailable("NOT_OWNER")
        if self._wal is None and self.commit_error is not None:
            raise self.unavailable("COMMIT_IN_DOUBT", IN_DOUBT)

    def unavailable(self, code: str, message: str | None = None) -> ServiceUnavailable:
        # A fatal failure needs a restart; otherwise the next commit attempt is due in
        # about the flusher's current backoff.
        fatal = self.failure is not None or self.fenced is not None
        retry_after = _FATAL_RETRY_AFTER_S if fatal else max(1, math.ceil(self.retry_delay))
        return ServiceUnavailable(
            message or self.degraded or "storage is unavailable", code=code, retry_after_s=retry_after
        )


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat()


def _size_text(size: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor:
            return f"{size / factor:g} {unit}"
    return f"{size} bytes"
