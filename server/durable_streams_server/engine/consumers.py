"""Named consumers: the progress a reader records, and its lag computed when asked.

Why: a reader that keeps its offsets to itself (Spark keeps them in its checkpoint) is
invisible to operations tools. A named consumer records, after each batch it committed,
where it has read to in each stream (``PUT {root}__ds/consumers/{name}``); the server
exports how far behind each consumer is (``/metrics``, ``GET /v1/consumers``).

Not a subscription's cursor: a subscription (§6) owns wakes, leases and generations, and
its ``acked_offset`` moves through a wake's ack. A consumer that plans its own reads (a
Spark query) wants none of that, only a durable, idempotent "I have read to here" that any
later record overwrites. So consumers are their own small state in the same reserved
namespace (``{root}__ds/consumers/{name}``), stored as subscriptions are
(``reserved_records``), with the same offset meaning as ``acked_offset`` but exclusive:
the recorded offset is where the next read starts (a Spark end offset).

State: per (root, name) one record carrying every stream position of the consumer (the
stream's path, the message sequence, the stream's incarnation, and two facts known only
at record time: the stream's byte count at that position, and the append time of the last
message read, where the memory tail still holds them). Each record keeps only positions of
streams that exist now, in the incarnation read, so a consumer of short-lived streams does
not grow with every stream it ever read. Recording a position of a stream that does not
exist is a 404; a position past the tail a 400.

Lag, per consumer and stream, at scrape time from what the engine keeps anyway, so
appends pay nothing: messages = tail - position (offsets carry message sequences);
bytes = the stream's byte count (``Stream.bytes_total``) - the byte count at the position
(where unknown, the lag in messages times the stream's mean message size); seconds = the
newest message's append time - the append time of the last message read (0 when caught
up; ``None`` when that time is unknown). A position of a deleted stream, or of an earlier
incarnation of its path, is not reported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..protocol.errors import BadRequest, NotFound
from ..protocol.offsets import Offset, encode_seq
from .ports import StoragePort
from .reserved_records import RESERVED_KEY, ReservedRecords, states_of
from .stream import Stream
from .stream_index import StreamIndex

KIND = "consumer"


class StreamsView(Protocol):
    """What consumers need of the engine (``Engine`` is one)."""

    storage: StoragePort
    clock: Callable[[], int]
    reserved: ReservedRecords

    @property
    def streams(self) -> MutableMapping[str, Stream]: ...

    def get_live(self, name: str) -> Stream: ...


@dataclass(frozen=True, slots=True)
class Position:
    seq: int
    incarnation: str
    bytes_at: int | None
    """The stream's byte count at ``seq``, where known when recorded."""
    read_ms: int | None
    """Append time of the last message read (message ``seq - 1``), where known."""

    def to_json(self) -> list[Any]:
        return [self.seq, self.incarnation, self.bytes_at, self.read_ms]

    @classmethod
    def from_json(cls, data: list[Any]) -> Position:
        return cls(int(data[0]), str(data[1]), data[2], data[3])


@dataclass(slots=True)
class Consumer:
    root: str
    name: str
    uid: int = 0
    positions: dict[str, Position] = field(default_factory=dict)
    updated_ms: int = 0

    def to_state(self) -> dict[str, Any]:
        return {
            RESERVED_KEY: KIND,
            "root": self.root,
            "name": self.name,
            "positions": {path: position.to_json() for path, position in self.positions.items()},
            "updated_ms": self.updated_ms,
        }


@dataclass(frozen=True, slots=True)
class Lag:
    consumer: str
    stream: str
    """The stream's key (``v1/stream/<path>`` or ``<bucket_id>/<stream_id>``)."""
    offset: str
    messages: int
    bytes: int
    seconds: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "consumer": self.consumer,
            "stream": self.stream,
            "offset": self.offset,
            "lag_messages": self.messages,
            "lag_bytes": self.bytes,
            "lag_seconds": self.seconds,
        }


class Consumers:
    """Every named consumer by (root, name) (see the module doc)."""

    def __init__(self, engine: StreamsView, index: StreamIndex) -> None:
        self.engine = engine
        self.index = index
        """Where lags look streams up without building them (a scrape wakes no sleeping stream)."""
        self.records: ReservedRecords = engine.reserved
        self.by_key: dict[tuple[str, str], Consumer] = {}

    def load(self, recovered: Mapping[int, Mapping[str, Any]]) -> None:
        for uid, state in states_of(recovered, KIND).items():
            positions = {path: Position.from_json(data) for path, data in state["positions"].items()}
            consumer = Consumer(state["root"], state["name"], uid, positions, int(state["updated_ms"]))
            self.by_key[(consumer.root, consumer.name)] = consumer

    def get(self, root: str, name: str) -> Consumer:
        consumer = self.by_key.get((root, name))
        if consumer is None:
            raise NotFound(f"consumer {name!r} not found", code="CONSUMER_NOT_FOUND")
        return consumer

    async def record(self, root: str, name: str, offsets: Mapping[str, Offset]) -> Consumer:
        """Move the consumer's positions in the named streams to ``offsets`` (durable on return)."""
        engine = self.engine
        engine.storage.check_writable()
        positions = {}
        for path, offset in offsets.items():
            stream = engine.get_live(root + path)
            if offset.seq > stream.visible_tail:
                raise BadRequest(
                    f"offset {offset} of {path!r} is past the stream's tail {encode_seq(stream.visible_tail)}",
                    code="OFFSET_BEYOND_TAIL",
                )
            positions[path] = Position(
                offset.seq, stream.incarnation, _bytes_at(stream, offset.seq), _read_ms(stream, offset.seq)
            )
        consumer = self.by_key.get((root, name)) or Consumer(root, name)
        consumer.positions.update(positions)
        for path in [path for path, kept in consumer.positions.items() if not self._current(root + path, kept)]:
            del consumer.positions[path]  # (a stream gone, or re-created: its position would never be reported)
        consumer.updated_ms = engine.clock()
        record = self.records.submit(consumer.uid or None, _reserved_name(consumer), consumer.to_state())
        consumer.uid = record.uid
        self.by_key[(root, name)] = consumer
        await self.records.durable(record.lsn)
        return consumer

    async def delete(self, root: str, name: str) -> None:
        consumer = self.get(root, name)
        self.engine.storage.check_writable()
        record = self.records.submit(consumer.uid, _reserved_name(consumer), None)
        del self.by_key[(root, name)]
        await self.records.durable(record.lsn)

    def lags(self, consumer: Consumer | None = None) -> list[Lag]:
        """Every position's lag (of ``consumer``, or of all), by consumer then stream."""
        consumers = [consumer] if consumer is not None else sorted(self.by_key.values(), key=_order)
        lags = []
        for each in consumers:
            for path in sorted(each.positions):
                lag = self._lag(each, path, each.positions[path])
                if lag is not None:
                    lags.append(lag)
        return lags

    def _current(self, name: str, position: Position) -> bool:
        """Whether ``position`` is of the stream now at ``name`` (not deleted, the same incarnation)."""
        stream = self.index.facts(name)
        return stream is not None and not stream.soft_deleted and stream.incarnation == position.incarnation

    def _lag(self, consumer: Consumer, path: str, position: Position) -> Lag | None:
        stream = self.index.facts(consumer.root + path)
        if stream is None or stream.soft_deleted or stream.incarnation != position.incarnation:
            return None
        messages = max(0, stream.tail - position.seq)
        name = consumer.root + path
        if messages == 0:
            return Lag(consumer.name, name, encode_seq(position.seq), 0, 0, 0.0)
        if position.bytes_at is not None:
            size = max(0, stream.bytes_total - position.bytes_at)
        else:
            size = messages * stream.bytes_total // max(1, stream.tail)
        seconds = None
        if position.read_ms is not None:
            seconds = max(0.0, (stream.last_write_ms - position.read_ms) / 1000)
        return Lag(consumer.name, name, encode_seq(position.seq), messages, size, seconds)


def _order(consumer: Consumer) -> tuple[str, str]:
    return consumer.name, consumer.root


def _reserved_name(consumer: Consumer) -> str:
    return f"{consumer.root}__ds/consumers/{consumer.name}"


def _bytes_at(stream: Stream, seq: int) -> int | None:
    """The stream's byte count before message ``seq``: exact while the messages after it are
    in the memory tail (a consumer near the tail), else unknown."""
    if seq >= stream.tail:
        return stream.bytes_total
    if seq >= stream.mem_base:
        return stream.bytes_total - int(stream.mem.sizes(seq, stream.tail).sum())
    return None


def _read_ms(stream: Stream, seq: int) -> int | None:
    """Append time of message ``seq - 1`` (the last one read): the stream's creation for a
    consumer that has read nothing, the memory tail's stamp where it still holds it."""
    if seq == 0:
        return stream.created_ms
    if seq >= stream.tail:
        return stream.last_write_ms
    if seq - 1 >= stream.mem_base:
        runs = stream.mem.runs(seq - 1, seq, 0, at_least_one=True)
        if runs:
            return runs[0].lists()[1][0]
    return None
