"""Snapshots (an extension): a stream's state at an offset, published by a client, read by bootstrap.

A snapshot is a record (its blob the one message) and a retention point: everything before its
offset is replaced by it (``Stream.earliest_retained``), and storage's maintenance deletes those
messages once the snapshot is in Delta (``retention.Retention.plan``).
"""

from __future__ import annotations

from collections.abc import Callable

from ..protocol.errors import Conflict, Gone, NotFound
from ..storage.records import SnapshotHeader
from .ports import StoragePort
from .stream import Stream
from .transitions import LiveState


class Snapshots:
    def __init__(
        self,
        storage: StoragePort,
        live: LiveState,
        get_live: Callable[[str], Stream],
        touch: Callable[[Stream], None],
        clock: Callable[[], int],
    ) -> None:
        self._storage = storage
        self._live = live
        self._get_live = get_live
        self._touch = touch
        self._clock = clock

    async def publish(self, name: str, seq: int, content_type: str, blob: bytes) -> Stream:
        self._storage.check_writable()
        stream = self._get_live(name)
        if seq > stream.visible_tail:
            raise Conflict("the snapshot offset is beyond the stream's tail", code="OFFSET_BEYOND_TAIL")
        if seq < stream.earliest_retained:
            raise Gone("the snapshot offset is older than the earliest retained offset", code="OFFSET_GONE")
        self._touch(stream)
        header = SnapshotHeader(seq=seq, content_type=content_type, ts=self._clock())
        record = self._storage.submit(stream.uid, header, (blob,))
        self._live.snapshot(stream, record)
        await self._storage.wait_durable(record.lsn)
        return stream

    async def blob(self, stream: Stream) -> bytes:
        """The latest snapshot's bytes, from memory or (once flushed) from Delta."""
        seq = stream.snapshot_seq
        assert seq is not None
        if stream.snapshot_data is not None:
            return stream.snapshot_data
        stored = await self._storage.read_snapshot(stream.uid, seq)
        if stored is None:
            raise NotFound("the snapshot's data is missing from storage", code="SNAPSHOT_NOT_FOUND")
        return stored[1]
