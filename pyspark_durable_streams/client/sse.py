"""Server-Sent Events framing (spec 5.8) on top of ``sseclient-py``.

sseclient-py parses the event-stream syntax; this module adds the protocol's meaning:
``data`` events carry stream bytes (base64 when the response says
``Stream-SSE-Data-Encoding: base64``) and every ``control`` event carries the offset to
resume from, the cursor to echo, and the up-to-date / closed flags.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import sseclient

from .errors import ResponseError


@dataclass(frozen=True)
class Control:
    """One ``event: control``: where the data so far ends, and the stream's state there."""

    next_offset: str
    cursor: str | None
    up_to_date: bool
    closed: bool


@dataclass(frozen=True)
class Data:
    """One ``event: data``, already decoded to the stream's bytes."""

    payload: bytes


def iter_events(chunks: Iterator[bytes], *, base64_encoded: bool) -> Iterator[Data | Control]:
    """The protocol events of an SSE body; events of other types are ignored (forward compatible)."""
    client: Any = sseclient.SSEClient(chunks)
    for event in client.events():
        if event.event == "data":
            yield Data(_decode_data(event.data, base64_encoded))
        elif event.event == "control":
            yield _parse_control(event.data)


def _decode_data(text: str, base64_encoded: bool) -> bytes:
    if not base64_encoded:
        return text.encode("utf-8")
    # Servers may split base64 over several data: lines; the line breaks are not data.
    try:
        return base64.b64decode(text.replace("\n", "").replace("\r", ""), validate=True)
    except binascii.Error as exc:
        raise ResponseError(f"invalid base64 in an SSE data event: {exc}") from exc


def _parse_control(text: str) -> Control:
    try:
        fields = json.loads(text)
        next_offset = fields["streamNextOffset"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ResponseError(f"SSE control event without streamNextOffset: {text[:200]!r}") from exc
    cursor = fields.get("streamCursor")
    return Control(
        next_offset=str(next_offset),
        cursor=str(cursor) if cursor is not None else None,
        up_to_date=fields.get("upToDate") is True or fields.get("streamClosed") is True,
        closed=fields.get("streamClosed") is True,
    )
