"""Where a read starts and where it ends: a closed set of kinds, each resolved once from the options.

``startingOffsets``, ``startingTimestamp`` and ``startingOffsetsByTimestamp`` (one of them at
most) become one ``Start``; ``endingOffsets`` or ``endingTimestamp`` one ``End`` (Spark's Kafka
source has the same split: ``KafkaOffsetRangeLimit`` resolved from its options once). Everything
past the parse works on these types: the driver turns a kind into each stream's protocol offset
(``_source.range_offsets``), asking the server only where the kind depends on it (a snapshot, a
time). Bad input raises an ``OptionError`` naming the option, at ``load()``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, cast

from .._source.offsets import EARLIEST
from .common import LATEST, Option, OptionError, json_object, millis, one_of, timestamps

TimeStrategy = Literal["error", "latest"]
"""Where a starting time after every message of a stream puts it: an error, or its tail."""

_PROTOCOL_OFFSET = re.compile(r"[0-9A-Za-z_.:~-]{1,256}")


def _offset_of(offsets: tuple[tuple[str, str], ...], key: str, tail: str, unnamed: str) -> str:
    """The offset ``offsets`` give stream ``key`` (``unnamed`` if none), ``LATEST`` being ``tail``."""
    given = dict(offsets).get(key, unnamed)
    return tail if given == LATEST else given


@dataclass(frozen=True)
class EarliestStart:
    """``startingOffsets=earliest`` (the default): every stream from its beginning."""


@dataclass(frozen=True)
class LatestStart:
    """``startingOffsets=latest``: every stream from its tail when the query starts."""


@dataclass(frozen=True)
class SnapshotStart:
    """``startingOffsets=snapshot``: every stream from its latest snapshot (``_source.snapshot_start``)."""


@dataclass(frozen=True)
class SpecificStart:
    """``startingOffsets`` as JSON: the named streams from the offsets given (``-1``: the beginning,
    ``LATEST``: the tail), every other stream from its beginning."""

    offsets: tuple[tuple[str, str], ...]
    """(stream key, protocol offset), sorted by key."""

    def offset(self, key: str, tail: str) -> str:
        return _offset_of(self.offsets, key, tail, EARLIEST)


@dataclass(frozen=True)
class TimestampStart:
    """``startingTimestamp``: every stream from its first message appended at or after ``at_ms``."""

    at_ms: int
    strategy: TimeStrategy = "error"


@dataclass(frozen=True)
class StreamTimestampsStart:
    """``startingOffsetsByTimestamp``: the named streams from their first message appended at or
    after their time, every other stream from its beginning."""

    times: tuple[tuple[str, int], ...]
    """(stream key, ms since the epoch), sorted by key."""
    strategy: TimeStrategy = "error"


Start = EarliestStart | LatestStart | SnapshotStart | SpecificStart | TimestampStart | StreamTimestampsStart


@dataclass(frozen=True)
class LatestEnd:
    """A batch read's default end: every stream's tail when the read is planned."""


@dataclass(frozen=True)
class SpecificEnd:
    """``endingOffsets`` as JSON: the named streams end before the offsets given (``LATEST``: the
    tail), every other stream at its tail."""

    offsets: tuple[tuple[str, str], ...]
    """(stream key, protocol offset), sorted by key."""

    def offset(self, key: str, tail: str) -> str:
        return _offset_of(self.offsets, key, tail, LATEST)


@dataclass(frozen=True)
class TimestampEnd:
    """``endingTimestamp`` (batch reads): every stream ends before its first message appended at or
    after ``at_ms``, at most at its tail when the read is planned."""

    at_ms: int


End = LatestEnd | SpecificEnd | TimestampEnd


def _offset_pairs(raw: str, name: str, words: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """A non-empty JSON object of stream -> offset; ``earliest``/``-2`` mean ``-1``, ``latest`` ``LATEST``."""
    parsed = json_object(raw, name, f"{' or '.join(words)} or a JSON object", "stream -> offset")
    pairs: list[tuple[str, str]] = []
    for stream, offset in parsed.items():
        if not isinstance(offset, str | int) or isinstance(offset, bool):
            raise OptionError(f"option '{name}': the offset of {stream!r} must be a string, got {offset!r}")
        value = {"earliest": EARLIEST, "latest": LATEST, "-2": EARLIEST}.get(str(offset).lower(), str(offset))
        if not _PROTOCOL_OFFSET.fullmatch(value):
            raise OptionError(f"option '{name}': {value!r} is not an offset (stream {stream!r})")
        pairs.append((str(stream).rstrip("/"), value))
    return tuple(sorted(pairs))


def starting_offsets(raw: str, name: str) -> EarliestStart | LatestStart | SnapshotStart | SpecificStart:
    """Option ``startingOffsets``: ``earliest``, ``latest``, ``snapshot`` or JSON per stream."""
    word = raw.strip().lower()
    words: dict[str, EarliestStart | LatestStart | SnapshotStart] = {
        "earliest": EarliestStart(),
        "latest": LatestStart(),
        "snapshot": SnapshotStart(),
    }
    if word in words:
        return words[word]
    return SpecificStart(_offset_pairs(raw.strip(), name, tuple(words)))


def ending_offsets(raw: str, name: str) -> LatestEnd | SpecificEnd:
    """Option ``endingOffsets``: ``latest`` or JSON per stream (never the beginning: ``-1``)."""
    if raw.strip().lower() == "latest":
        return LatestEnd()
    pairs = _offset_pairs(raw.strip(), name, ("latest",))
    if any(offset == EARLIEST for _, offset in pairs):
        raise OptionError(f"option '{name}' cannot use 'earliest' / -1")
    return SpecificEnd(pairs)


STARTING = Option[EarliestStart | LatestStart | SnapshotStart | SpecificStart](
    "startingOffsets", starting_offsets, EarliestStart()
)
ENDING = Option[LatestEnd | SpecificEnd]("endingOffsets", ending_offsets, LatestEnd())
STARTING_TIMESTAMP = Option[int | None]("startingTimestamp", millis, None)
ENDING_TIMESTAMP = Option[int | None]("endingTimestamp", millis, None)
BY_TIMESTAMP = Option[tuple[tuple[str, int], ...]]("startingOffsetsByTimestamp", timestamps, ())
STRATEGY = Option[str | None]("startingOffsetsByTimestampStrategy", one_of("error", "latest"), "error")
RANGE_OPTIONS = (STARTING, ENDING, STARTING_TIMESTAMP, ENDING_TIMESTAMP, BY_TIMESTAMP, STRATEGY)
"""The options this module resolves, in the order of the read table."""


def resolve_start(lowered: Mapping[str, str]) -> Start:
    """The one ``Start`` the options say (``earliest`` where none does)."""
    given = [option for option in (STARTING, STARTING_TIMESTAMP, BY_TIMESTAMP) if option.key in lowered]
    if len(given) > 1:
        raise OptionError(f"options {' and '.join(repr(option.name) for option in given)} are mutually exclusive")
    if STRATEGY.key in lowered and not {STARTING_TIMESTAMP.key, BY_TIMESTAMP.key} & set(lowered):
        raise OptionError(f"option '{STRATEGY.name}' needs '{STARTING_TIMESTAMP.name}' or '{BY_TIMESTAMP.name}'")
    strategy = cast(TimeStrategy, STRATEGY.get(lowered) or STRATEGY.default)
    at_ms = STARTING_TIMESTAMP.get(lowered)
    if at_ms is not None:
        return TimestampStart(at_ms, strategy)
    if BY_TIMESTAMP.key in lowered:
        return StreamTimestampsStart(BY_TIMESTAMP.get(lowered), strategy)
    return STARTING.get(lowered)


def resolve_end(lowered: Mapping[str, str]) -> End:
    """The one ``End`` the options say (the tails where none does)."""
    if ENDING.key in lowered and ENDING_TIMESTAMP.key in lowered:
        raise OptionError(f"options '{ENDING.name}' and '{ENDING_TIMESTAMP.name}' are mutually exclusive")
    at_ms = ENDING_TIMESTAMP.get(lowered)
    return TimestampEnd(at_ms) if at_ms is not None else ENDING.get(lowered)


def check_range(start: Start, end: End, urls: Iterable[str]) -> None:
    """What involves both, or the streams read: a start after the end; a stream named that is not read."""
    if isinstance(start, TimestampStart) and isinstance(end, TimestampEnd) and start.at_ms > end.at_ms:
        raise OptionError(
            f"option '{STARTING_TIMESTAMP.name}' ({start.at_ms}) must not be after '{ENDING_TIMESTAMP.name}' "
            f"({end.at_ms})"
        )
    read = set(urls)
    named = (
        (STARTING.name, start.offsets if isinstance(start, SpecificStart) else ()),
        (ENDING.name, end.offsets if isinstance(end, SpecificEnd) else ()),
        (BY_TIMESTAMP.name, start.times if isinstance(start, StreamTimestampsStart) else ()),
    )
    for name, pairs in named:
        unknown = sorted(key for key, _ in pairs if read and key not in read)
        if unknown:
            raise OptionError(f"option '{name}' names stream(s) that are not read: {', '.join(unknown)}")
