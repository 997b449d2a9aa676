"""The WAL writer: submitted records' frames and the flusher's segment cuts, in log order,
group-committed into the write-ahead log under storage's sync policy (``sync_policy``: every
write and sync on the dedicated sync thread, a batch counted durable only after its sync).

``queue`` takes each record's encoded frame synchronously (from ``Storage.submit``, in LSN
order) and hands it to the sync thread at once. On that thread a batch is written with one
call (``WriteAheadLog.write``: the write and its sync), and its highest LSN is then marked
durable on the loop (``Acknowledgements.mark_durable``, which wakes the appenders and,
through ``Engine.on_durable``, the long-poll and SSE readers).

**Segments.** The flusher asks for a new segment at its cut (``rotate_at``): the frames below
the cut go into the current segment, the rest into a new one named by the cut, so that the
segments below it can be deleted once the Delta commit covering them has succeeded. The cut
is handed over in the same queue as the frames, so the order of the queue is the order of
the log: the flusher asks for it in the turn it cuts, when every frame below the cut is
queued already and none above it is. A batch that holds a cut writes the frames before it,
starts the new segment (which syncs the directory), then writes the rest. Opening the first
segment after recovery (``recovered``) is handed over the same way, so that the loop's thread
never writes or syncs the log at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .acks import Acknowledgements
from .sync_policy import SyncPolicy
from .wal import WriteAheadLog


@dataclass(frozen=True, slots=True)
class _NewSegment:
    """Write the following frames into a new segment named by ``first_lsn``."""

    first_lsn: int


_Item = tuple[int, bytes] | _NewSegment
"""A record's (LSN, frame), or a segment cut."""


class WalWriter:
    def __init__(self, wal: WriteAheadLog, acks: Acknowledgements, on_failure: Callable[[OSError], None]) -> None:
        self.wal = wal
        self.policy: SyncPolicy[_Item] = SyncPolicy(self._write, acks.mark_durable, on_failure)

    def recovered(self, last_lsn: int) -> None:
        """Continue after ``last_lsn``, in a new segment."""
        self.policy.hand_over(_NewSegment(last_lsn + 1))

    def queue(self, lsn: int, frame: bytes) -> None:
        self.policy.hand_over((lsn, frame))

    def rotate_at(self, first_lsn: int) -> None:
        """Start a new segment at ``first_lsn``: everything before it is queued already (see
        the module docstring)."""
        self.policy.hand_over(_NewSegment(first_lsn))

    def close(self) -> None:
        """Let ``run`` return once everything queued is written."""
        self.policy.stop()

    async def run(self) -> None:
        await self.policy.run()

    def _write(self, batch: list[_Item]) -> int:
        """On the sync thread: write (and sync) the batch's frames, starting the segments it
        asks for between them; the last LSN written (0: none)."""
        wal = self.wal
        frames: list[bytes] = []
        last = 0
        for item in batch:
            if isinstance(item, _NewSegment):
                if frames:
                    wal.write(frames)
                    frames = []
                wal.start_segment(item.first_lsn)
            else:
                last, frame = item
                frames.append(frame)
        if frames:
            wal.write(frames)
        return last
