"""Read plans: where a range of a stream is stored (our server's extension, README "Read plans").

``GET <stream>?offset=<start>&end=<end>`` with ``Accept: application/vnd.durable-streams.read-plan+json``
answers, instead of the messages, a JSON plan: the Delta table version, ``delta_end`` (below
it the range is in the listed files, from it on it must be read over HTTP), and per stream
incarnation the range crosses a ``PlanSegment`` listing the data files (``PlannedFile``) and
their row groups (``PlannedRowGroup``) that can hold the range's messages. ``fetch_plan``
parses it into these types once, checking every field, so callers never index raw JSON.

File URLs are made absolute here: the server's own file endpoint comes relative to the plan's
URL, an object store's presigned URL absolute. Either way the URL is its own grant (a
signature in its query): read it with ``Client.open_file``, which sends no credentials.

A server or a storage without plans answers ``501`` (or, not knowing the extension, ``400``,
``405``, ``406`` or the messages themselves): ``PlansUnavailable``. ``Gone`` (410: the range is
below the retained history) and other errors propagate as from any read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

from . import errors
from ._http import HTTP, USE_DEFAULT, Timeout, UseDefault
from .extension_get import get_extension_json

READ_PLAN = "application/vnd.durable-streams.read-plan+json"


class PlansUnavailable(errors.DurableStreamsError):
    """The server (or this stream's storage) offers no read plans: read over HTTP instead."""


@dataclass(frozen=True)
class PlannedRowGroup:
    """One row group of a planned file, from its Parquet statistics."""

    index: int
    first_seq: int
    last_seq: int
    """The largest ``seq`` in the row group (a state row's may exceed the stream's messages)."""
    rows: int
    exact: bool
    """The row group holds rows of this stream incarnation only."""


@dataclass(frozen=True)
class PlannedFile:
    url: str
    """Absolute: the server's signed file URL, or a presigned object-store URL."""
    size: int
    row_groups: tuple[PlannedRowGroup, ...]
    path: str
    """The file's path in the table."""
    local_path: str | None = None
    """The server's local path of the file (a local table): a reader that sees it may open it there."""


@dataclass(frozen=True)
class PlanSegment:
    """The part of the range in one stream incarnation (a fork's inherited part: its source's)."""

    stream_uid: int
    first_seq: int
    end_seq: int
    files: tuple[PlannedFile, ...]


@dataclass(frozen=True)
class ReadPlan:
    stream: str
    incarnation: str
    content_type: str
    start: str
    end: str
    """Offsets: the range planned (``end`` cut at the visible tail)."""
    delta_end: str
    """``[start, delta_end)`` is in the segments' files; ``[delta_end, end)`` is read over HTTP."""
    table_version: int
    expires_at_ms: int
    """When the file URLs stop being valid."""
    segments: tuple[PlanSegment, ...]


def fetch_plan(
    http: HTTP,
    url: str,
    start: str,
    end: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: Timeout | UseDefault = USE_DEFAULT,
) -> ReadPlan:
    """The plan of ``[start, end)`` of the stream at ``url`` (``end`` None: up to the tail)."""
    params = {"offset": start} if end is None else {"offset": start, "end": end}
    body = get_extension_json(http, url, params, READ_PLAN, PlansUnavailable, headers=headers, timeout=timeout)
    try:
        return parse_plan(url, body)
    except (KeyError, TypeError, ValueError) as exc:
        raise errors.ResponseError(f"GET {url}: a malformed read plan ({type(exc).__name__}: {exc})") from exc


def parse_plan(url: str, body: Mapping[str, Any]) -> ReadPlan:
    """A plan's JSON as typed values, file URLs made absolute against ``url``."""
    return ReadPlan(
        stream=str(body["stream"]),
        incarnation=str(body["incarnation"]),
        content_type=str(body["content_type"]),
        start=str(body["start"]),
        end=str(body["end"]),
        delta_end=str(body["delta_end"]),
        table_version=int(body["table_version"]),
        expires_at_ms=int(body["expires_at_ms"]),
        segments=tuple(_segment(url, segment) for segment in body["segments"]),
    )


def _segment(url: str, raw: Mapping[str, Any]) -> PlanSegment:
    files = tuple(
        PlannedFile(
            url=urljoin(url, str(file["url"])),
            size=int(file["size"]),
            row_groups=tuple(_row_group(group) for group in file["row_groups"]),
            path=str(file["path"]),
            local_path=str(file["local_path"]) if file.get("local_path") is not None else None,
        )
        for file in raw["files"]
    )
    return PlanSegment(int(raw["stream_uid"]), int(raw["first_seq"]), int(raw["end_seq"]), files)


def _row_group(raw: Mapping[str, Any]) -> PlannedRowGroup:
    exact = raw["exact"]
    if not isinstance(exact, bool):
        raise TypeError(f"row group 'exact' must be true or false, got {exact!r}")
    return PlannedRowGroup(int(raw["index"]), int(raw["first_seq"]), int(raw["last_seq"]), int(raw["rows"]), exact)
