"""What the engine needs from storage: the port it talks through (``StoragePort``).

The engine and the readers in ``reads`` depend on this protocol, not on the storage
package's classes: ``storage.Storage`` implements it, and nothing in the engine reaches
past it into Delta tables or WAL files. (The reverse direction, what storage needs from
the engine, is ``storage.view.StateView``.)
"""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa

from ..storage.history_reader import StoredMessage
from ..storage.message_batch import MessageBatch
from ..storage.read_plans import TablePlan
from ..storage.records import H, Record
from ..storage.view import StateView


class StoragePort(Protocol):
    def attach(self, view: StateView) -> None:
        """Register the engine for state snapshots and progress callbacks."""
        ...

    # -- writes -----------------------------------------------------------------------

    def check_writable(self) -> None:
        """Raise ``ServiceUnavailable`` (with ``retry_after_s``) while storage could not
        make a write durable soon; called before anything is validated or changed."""
        ...

    @property
    def next_lsn(self) -> int:
        """The LSN the next record will get (a create uses it as the new uid)."""
        ...

    def submit(self, uid: int, header: H, messages: tuple[bytes, ...] | MessageBatch = ()) -> Record[H]:
        """Stamp the next LSN on a state change and queue it for durability."""
        ...

    async def wait_durable(self, lsn: int) -> None:
        """Return once the record ``lsn`` (and all before it) is durable."""
        ...

    @property
    def flushed_lsn(self) -> int:
        """Every record up to this LSN is in Delta, with the states it changed."""
        ...

    # -- history ----------------------------------------------------------------------

    async def read_messages(self, uid: int, start_seq: int, end_seq: int) -> list[StoredMessage]:
        """Stored messages ``start_seq <= seq < end_seq`` of one stream, in order."""
        ...

    async def read_history(self, uid: int, start_seq: int, end_seq: int, max_bytes: int) -> pa.Table:
        """Whole stored messages from ``start_seq`` (before ``end_seq``), each taken while
        ``max_bytes`` is not yet spent and at least one, as Arrow columns ``seq``, ``ts``,
        ``data`` (and ``meta``), in order. Reads about ``max_bytes`` from storage, wherever
        in the stream ``start_seq`` is; may stop short of both when the messages are spread
        over many small files (a bounded number of files per read)."""
        ...

    async def plan_reads(self, segments: list[tuple[int, int, int]]) -> TablePlan:
        """The table version and the data files that hold the messages ``first <= seq < end``
        of each segment's uid (``storage.read_plans``)."""
        ...

    async def first_at(self, segments: list[tuple[int, int, int]], at_us: int) -> int | None:
        """The smallest ``seq`` of the segments ``(uid, first, end)``, taken in order, whose
        stored message was appended at or after ``at_us`` (``storage.time_index``)."""
        ...

    async def read_snapshot(self, uid: int, seq: int) -> tuple[str, bytes] | None:
        """Content type and blob of the newest snapshot stored for offset ``seq``."""
        ...
