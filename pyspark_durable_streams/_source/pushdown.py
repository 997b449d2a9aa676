"""Filter pushdown for batch reads: filters on ``stream``, ``offset`` and ``timestamp`` narrow
what is planned and read (option ``filterPushdown``; PySpark >= 4.1 with
``spark.sql.python.filterPushdown.enabled``).

``Bounds.of(filters)`` keeps what the filters say of the three columns; ``narrow`` turns it
into each stream's start and end:

* ``stream = s`` / ``stream IN (…)``: only those streams are planned;
* ``offset`` compared with a sequence offset of our server (``=``, ``>``, ``>=``, ``<``,
  ``<=``): the range is cut at that message (``<= o`` and ``= o`` keep message ``o``);
* ``timestamp`` compared with a time: the range is cut at the first message appended at or
  after it (``>=``/``>``: the start; ``<``: the end; ``<=``: the end before the next
  millisecond), asked of the server's time lookups (``time_offsets``; a time without a zone
  is not used).

Every filter is handed back to Spark as not handled, so Spark applies them all to the rows
read and the result is exact whatever the cut's precision (a cut is always at or outside the
rows the filter keeps: the plan only drops what no filter could keep). Direct history reads
then skip the files and row groups outside the range, and HTTP reads never ask for them.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .offsets import SEQ_OFFSET, seq_of, seq_offset

_LOWER = ("GreaterThan", "GreaterThanOrEqual")
_UPPER = ("LessThan", "LessThanOrEqual")


@dataclass
class Bounds:
    streams: set[str] | None = None
    """The only streams a filter keeps (``None``: any)."""
    first_seq: int = 0
    end_seq: int | None = None
    """Messages ``first_seq <= seq < end_seq`` by ``offset`` filters."""
    since_ms: int | None = None
    before_ms: int | None = None
    """Messages appended ``since_ms <= ts < before_ms`` (ms) by ``timestamp`` filters."""
    seen: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, filters: list[Any]) -> Bounds:
        bounds = cls()
        for found in filters:
            bounds._add(type(found).__name__, tuple(getattr(found, "attribute", ())), getattr(found, "value", None))
        return bounds

    def _add(self, kind: str, column: tuple[str, ...], value: Any) -> None:
        if column == ("stream",) and kind in ("EqualTo", "In"):
            values = {str(v).rstrip("/") for v in (value if kind == "In" else (value,)) if v is not None}
            self.streams = values if self.streams is None else self.streams & values
        elif column == ("offset",) and isinstance(value, str) and SEQ_OFFSET.match(value):
            seq = seq_of(value) + (0 if value.endswith("_0000000000000000") else 1)
            if kind in (*_LOWER, "EqualTo"):
                self.first_seq = max(self.first_seq, seq_of(value))
            if kind in ("LessThanOrEqual", "EqualTo"):
                self._end(seq_of(value) + 1)
            elif kind == "LessThan":
                self._end(seq)
        elif column == ("timestamp",) and isinstance(value, dt.datetime) and value.tzinfo is not None:
            ms = value.timestamp() * 1000
            if kind in _LOWER:
                self.since_ms = max(self.since_ms or 0, math.floor(ms))
            elif kind == "LessThan":
                self._before(math.ceil(ms))
            elif kind == "LessThanOrEqual":
                self._before(math.floor(ms) + 1)
            elif kind == "EqualTo":
                self.since_ms = max(self.since_ms or 0, math.floor(ms))
                self._before(math.floor(ms) + 1)
        else:
            return
        self.seen.append(kind)

    def _end(self, seq: int) -> None:
        self.end_seq = seq if self.end_seq is None else min(self.end_seq, seq)

    def _before(self, ms: int) -> None:
        self.before_ms = ms if self.before_ms is None else min(self.before_ms, ms)

    def keeps(self, key: str) -> bool:
        return self.streams is None or key in self.streams

    def narrow(self, key: str, start: str, end: str, offset_at: Any) -> tuple[str, str]:
        """``[start, end)`` of stream ``key`` cut by these bounds (``offset_at(key, ms)``: the
        first offset appended at or after ``ms``, or the tail; ``None``: unknown, no cut)."""
        if not SEQ_OFFSET.match(end):
            return start, end  # (another server's offsets: nothing to cut by)
        if self.first_seq:
            start = max(start, seq_offset(self.first_seq))
        if self.end_seq is not None:
            end = min(end, seq_offset(self.end_seq))
        since = offset_at(key, self.since_ms) if self.since_ms is not None else None
        before = offset_at(key, self.before_ms) if self.before_ms is not None else None
        start = max(start, since) if since is not None else start
        end = min(end, before) if before is not None else end
        return start, max(start, end)


def narrowed(
    bounds: Bounds, start: Mapping[str, str], end: Mapping[str, str], offset_at: Any
) -> tuple[dict[str, str], dict[str, str]]:
    """The start and end offsets of the streams the bounds keep, cut by them."""
    first, last = {}, {}
    for key in end:
        if bounds.keeps(key):
            first[key], last[key] = bounds.narrow(key, start[key], end[key], offset_at)
    return first, last
