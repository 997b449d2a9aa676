"""Named consumers' progress and lag, and deleted streams' tombstones (our server's extension
in the reserved ``__ds`` namespace of a stream root; README "Named consumers and tombstones").

- ``Consumers`` (``Client.consumers()`` / ``Client.consumers("my-bucket")``): record a named
  consumer's progress (the next offset it will read, per stream path of the root), read it
  with its lag, forget it; look up a deleted stream's tombstone.
- ``Client.consumer_lag()``: every position the client's token may read, with its lag.
- ``stream_root(url)``: the root URL and path of a stream URL on the base surface
  (``…/v1/stream/<path>``), where its consumers and tombstones live.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import errors
from ._http import HTTP, Backoff
from .delivery import retrying
from .errors import BadRequest, HTTPStatusError, NotFound, ResponseError

JSON = {"Content-Type": "application/json"}
BASE_SURFACE = "/v1/stream/"


@dataclass(frozen=True)
class ConsumerLag:
    """How far one consumer is behind in one stream (``stream``: the server's stream key)."""

    consumer: str
    stream: str
    offset: str
    lag_messages: int
    lag_bytes: int
    lag_seconds: float | None

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> ConsumerLag:
        seconds = row.get("lag_seconds")
        return cls(
            str(row["consumer"]),
            str(row["stream"]),
            str(row["offset"]),
            int(row["lag_messages"]),
            int(row["lag_bytes"]),
            None if seconds is None else float(seconds),
        )


@dataclass(frozen=True)
class Tombstone:
    """A deleted stream's end, as the server kept it."""

    stream: str
    incarnation: str
    final_offset: str
    messages: int
    deleted_at_ms: int


class Consumers:
    """The named consumers and tombstones of one stream root (``root_url`` ends with '/').
    ``backoff`` governs how long a tombstone lookup is asked again while the server answers
    "later" (the client's)."""

    def __init__(self, transport: HTTP, root_url: str, backoff: Backoff | None = None) -> None:
        self.root_url = root_url if root_url.endswith("/") else root_url + "/"
        self._transport = transport
        self._backoff = backoff or Backoff()

    def __repr__(self) -> str:
        return f"Consumers({self.root_url!r})"

    def record(self, name: str, offsets: Mapping[str, str]) -> dict[str, Any]:
        """Move consumer ``name`` to ``offsets`` (stream path -> next offset to read); the
        consumer's positions and lag as the server answers them."""
        content = json.dumps({"offsets": dict(offsets)}).encode()
        response = self._transport.request("PUT", self._url(name), ok=(200,), headers=JSON, content=content)
        return _object(response.json())

    def get(self, name: str) -> dict[str, Any]:
        return _object(self._transport.request("GET", self._url(name), ok=(200,)).json())

    def delete(self, name: str) -> None:
        self._transport.request("DELETE", self._url(name), ok=(204,))

    def tombstone(self, path: str) -> Tombstone | None:
        """The tombstone of the deleted stream at ``path``; ``None`` when the server keeps none
        (never deleted, past its retention, or a server without this extension). Answers
        saying "later" (``errors.ANSWERED_LATER``, but 501: no such extension) are asked again
        until the backoff's deadline, as a HEAD is; other failures are raised: a caller judging
        data loss by the answer must not take "could not ask" for "none kept"."""
        url = f"{self.root_url}__ds/tombstones/{path}"
        try:
            response = retrying(
                lambda: self._transport.request("GET", url, ok=(200,)),
                backoff=self._backoff,
                retry=_answered_later,
            )
            body = _object(response.json())
        except (NotFound, BadRequest):
            return None
        except HTTPStatusError as exc:
            if exc.status in (405, 501):
                return None
            raise
        return Tombstone(
            str(body["stream"]),
            str(body["incarnation"]),
            str(body["final_offset"]),
            int(body["messages"]),
            int(body["deleted_at_ms"]),
        )

    def _url(self, name: str) -> str:
        return f"{self.root_url}__ds/consumers/{name}"


def consumer_lag(transport: HTTP) -> list[ConsumerLag]:
    """``GET /v1/consumers``: every position the token may read, with its lag."""
    body = _object(transport.request("GET", transport.url("v1/consumers"), ok=(200,)).json())
    rows = body.get("consumers")
    if not isinstance(rows, list):
        raise ResponseError("GET /v1/consumers answered no 'consumers' list")
    return [ConsumerLag.from_json(row) for row in rows]


def stream_root(url: str) -> tuple[str, str] | None:
    """``(root URL, path)`` of a stream URL on the base surface; ``None`` for other shapes."""
    head, found, path = url.partition(BASE_SURFACE)
    if not found or not path:
        return None
    return head + BASE_SURFACE, path


def _answered_later(exc: errors.DurableStreamsError) -> bool:
    """A "not now" answer (501 says the extension is missing: not asked again)."""
    return isinstance(exc, errors.ANSWERED_LATER) and isinstance(exc, HTTPStatusError) and exc.status != 501


def _object(body: object) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ResponseError(f"the server answered {type(body).__name__}, not a JSON object")
    return body
