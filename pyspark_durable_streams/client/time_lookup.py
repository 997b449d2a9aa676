"""Time lookups: the first offset of a stream at or after a time (our server's extension,
README "Time lookups").

``GET <stream>?timestamp=<ms>`` with ``Accept: application/vnd.durable-streams.offset-for-time+json``
answers, instead of the messages, ``offset``: the first message appended at or after that
time (``None`` when none was), and ``next_offset``: the tail when it answered.

A server without the extension (``extension_get``): ``TimeLookupUnavailable``. Other errors
propagate as from any read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from . import errors
from ._http import HTTP, USE_DEFAULT, Timeout, UseDefault
from .extension_get import get_extension_json

OFFSET_FOR_TIME = "application/vnd.durable-streams.offset-for-time+json"


class TimeLookupUnavailable(errors.DurableStreamsError):
    """The server offers no time lookups (it is not ours, or too old)."""


@dataclass(frozen=True)
class TimeLookup:
    timestamp: int
    """Milliseconds since the epoch, as asked."""
    offset: str | None
    """The first message appended at or after ``timestamp``; ``None``: none was (yet)."""
    next_offset: str
    """The stream's tail when the server answered."""
    incarnation: str


def lookup_time(
    http: HTTP,
    url: str,
    timestamp_ms: int,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: Timeout | UseDefault = USE_DEFAULT,
) -> TimeLookup:
    params = {"timestamp": str(timestamp_ms)}
    unavailable = TimeLookupUnavailable
    body = get_extension_json(http, url, params, OFFSET_FOR_TIME, unavailable, headers=headers, timeout=timeout)
    try:
        offset = body["offset"]
        found = None if offset is None else str(offset)
        return TimeLookup(int(body["timestamp"]), found, str(body["next_offset"]), str(body["incarnation"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise errors.ResponseError(f"GET {url}: a malformed time lookup ({type(exc).__name__}: {exc})") from exc
