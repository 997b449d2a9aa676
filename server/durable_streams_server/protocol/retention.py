"""Retention policies (an extension): how much of a stream that lives forever is kept.

A policy has up to three limits, each optional, as Kafka's ``retention.ms`` /
``retention.bytes`` and EventStoreDB's ``$maxAge`` / ``$maxCount``:

* ``max_age_s``: messages appended more than this many seconds ago may be removed;
* ``max_bytes``: the newest messages are kept while they hold at least this many bytes;
  older ones may be removed;
* ``max_messages``: the newest this many messages are kept; older ones may be removed.

A message goes once any limit lets it go. Limits are kept, never exceeded downward: storage
removes whole runs of messages at the points it marked while appending (``engine.retention``),
so a stream keeps its limit plus at most one run's worth.

On the wire, each limit is a request header (``Stream-Retention-Max-Age`` ...) with a
positive integer, or ``none`` (no limit: on a create, it overrides a default; on a change,
it removes the limit). A request without any of them names no limit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .errors import BadRequest

STREAM_RETENTION_MAX_AGE = "Stream-Retention-Max-Age"
STREAM_RETENTION_MAX_BYTES = "Stream-Retention-Max-Bytes"
STREAM_RETENTION_MAX_MESSAGES = "Stream-Retention-Max-Messages"
STREAM_EARLIEST_OFFSET = "Stream-Earliest-Offset"
"""HEAD, listings and a ``410`` below it: the first offset a read may still ask for."""
STREAM_RETAINED_BYTES = "Stream-Retained-Bytes"
"""HEAD: the bytes of the messages from the earliest offset to the tail."""

HEADERS = {
    "max_age_s": STREAM_RETENTION_MAX_AGE,
    "max_bytes": STREAM_RETENTION_MAX_BYTES,
    "max_messages": STREAM_RETENTION_MAX_MESSAGES,
}
_LOOKED_UP = {name: header.lower() for name, header in HEADERS.items()}
"""The names ``parse_changes`` looks up: lower-case, as a plain dict of a request's headers holds them
(Starlette's ``Headers`` answers any case)."""
NONE = "none"
_LIMIT_RE = re.compile(r"^[1-9][0-9]{0,15}$")
_MAX_LIMIT = 2**53 - 1


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """A stream's limits; ``None``: no limit of that kind."""

    max_age_s: int | None = None
    max_bytes: int | None = None
    max_messages: int | None = None

    def __bool__(self) -> bool:  # (each field by name: ``fields()`` made this ~1.5 µs, asked on every create)
        return self.max_age_s is not None or self.max_bytes is not None or self.max_messages is not None

    def with_changes(self, changes: Mapping[str, int | None]) -> RetentionPolicy:
        """This policy with the limits a request named (``None``: removed)."""
        return replace(self, **changes)

    def to_json(self) -> dict[str, int]:
        return {name: value for name in HEADERS if (value := getattr(self, name)) is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> RetentionPolicy:
        return cls(**{name: data[name] for name in HEADERS if data and data.get(name) is not None})

    def headers(self) -> dict[str, str]:
        return {HEADERS[name]: str(value) for name, value in self.to_json().items()}


def parse_changes(headers: Mapping[str, str]) -> dict[str, int | None]:
    """The limits a request names: a positive integer, or ``None`` for ``none``; absent
    headers are left out. ``BadRequest`` names the header that is wrong. ``headers``: looked
    up by lower-case name (Starlette's ``Headers``, or a plain dict of them so)."""
    changes: dict[str, int | None] = {}
    for name, header in HEADERS.items():
        raw = headers.get(_LOOKED_UP[name])
        if raw is None:
            continue
        raw = raw.strip()
        if raw.lower() == NONE:
            changes[name] = None
        elif _LIMIT_RE.fullmatch(raw) and int(raw) <= _MAX_LIMIT:
            changes[name] = int(raw)
        else:
            raise BadRequest(
                f"invalid {header} {raw!r}: expected a positive integer or 'none'", code="INVALID_RETENTION"
            )
    return changes


def resolve(*layers: Mapping[str, int | None]) -> RetentionPolicy:
    """The policy of a new stream: each limit from the first layer that names it (a request's
    changes, then its bucket's defaults, then the server's), ``None`` included."""
    if not any(layers):  # (most creates: no layer names a limit)
        return NO_LIMITS
    values = {name: next((layer[name] for layer in layers if name in layer), None) for name in HEADERS}
    return RetentionPolicy(**values)


NO_LIMITS = RetentionPolicy()
