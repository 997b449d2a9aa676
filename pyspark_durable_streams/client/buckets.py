"""Buckets (extensions section 1): namespaces of streams at ``{base}/{bucket_id}/{stream_id}``.

Buckets are created explicitly, listed with cursor pagination (exposed here as a plain
iterator that fetches pages on demand) and deleted only when empty.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ._http import HTTP, USE_DEFAULT, Backoff, Timeout, UseDefault, quote_segment
from .errors import Conflict, ResponseError
from .stream import Stream

_BUCKET_ID_RE = re.compile(r"[a-z0-9_-]{4,64}")


@dataclass(frozen=True)
class BucketInfo:
    bucket_id: str
    streams: int
    """How many streams the bucket holds."""


@dataclass(frozen=True)
class StreamInfo:
    """One entry of a bucket listing; ``raw`` keeps every field the server sent."""

    stream_id: str
    status: str | None
    content_type: str | None
    tail_offset: str | None
    created_at_ms: int | None
    last_write_at_ms: int | None
    raw: Mapping[str, Any]


class Bucket:
    def __init__(self, transport: HTTP, bucket_id: str, *, backoff: Backoff) -> None:
        if not _BUCKET_ID_RE.fullmatch(bucket_id):
            raise ValueError(f"invalid bucket id {bucket_id!r}: it must match ^[a-z0-9_-]{{4,64}}$")
        self.bucket_id = bucket_id
        self.url = transport.url(bucket_id)
        self._transport = transport
        self._backoff = backoff

    def __repr__(self) -> str:
        return f"Bucket({self.url!r})"

    def stream(self, stream_id: str, *, content_type: str | None = None) -> Stream:
        """A handle on ``{bucket}/{stream_id}`` (the id is percent-encoded as one path segment)."""
        url = f"{self.url}/{quote_segment(stream_id)}"
        return Stream(self._transport, url, content_type=content_type, backoff=self._backoff)

    def create(
        self,
        *,
        exist_ok: bool = False,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout | UseDefault = USE_DEFAULT,
    ) -> bool:
        """Create the bucket; True if created, False if it existed and ``exist_ok`` (else ``Conflict``)."""
        try:
            self._transport.request("PUT", self.url, ok=(200, 201), headers=headers, timeout=timeout)
        except Conflict:
            if not exist_ok:
                raise
            return False
        return True

    def info(
        self, *, headers: Mapping[str, str] | None = None, timeout: Timeout | UseDefault = USE_DEFAULT
    ) -> BucketInfo:
        body = self._get_json(self.url, None, headers, timeout)
        return BucketInfo(bucket_id=str(body.get("bucket_id", self.bucket_id)), streams=int(body.get("streams", 0)))

    def delete(self, *, headers: Mapping[str, str] | None = None, timeout: Timeout | UseDefault = USE_DEFAULT) -> None:
        """Delete the bucket; it must be empty (``Conflict`` otherwise)."""
        self._transport.request("DELETE", self.url, ok=(200, 204), headers=headers, timeout=timeout)

    def streams(
        self,
        prefix: str | None = None,
        *,
        after: str | None = None,
        page_size: int | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout | UseDefault = USE_DEFAULT,
    ) -> Iterator[StreamInfo]:
        """Every stream in the bucket (optionally with ``prefix``), sorted by id, after ``after``.

        Pages of ``page_size`` (server default 1000) are fetched as the iterator advances.
        """
        cursor = after
        while True:
            params = {"prefix": prefix, "after": cursor, "limit": str(page_size) if page_size else None}
            page = self._get_json(
                f"{self.url}/streams", {k: v for k, v in params.items() if v is not None}, headers, timeout
            )
            entries = page.get("streams")
            if not isinstance(entries, list):
                raise ResponseError(f"GET {self.url}/streams answered without a streams list")
            for entry in entries:
                yield _stream_info(entry)
            if not page.get("has_more") or not entries:
                return
            cursor = str(page.get("next_cursor") or entries[-1]["stream_id"])

    def _get_json(
        self,
        url: str,
        params: Mapping[str, str] | None,
        headers: Mapping[str, str] | None,
        timeout: Timeout | UseDefault,
    ) -> dict[str, Any]:
        response = self._transport.request("GET", url, ok=(200,), params=params, headers=headers, timeout=timeout)
        try:
            body = response.json()
        except ValueError as exc:
            raise ResponseError(f"GET {url} answered a body that is not JSON") from exc
        if not isinstance(body, dict):
            raise ResponseError(f"GET {url} answered {type(body).__name__}, not a JSON object")
        return body


def _stream_info(entry: Mapping[str, Any]) -> StreamInfo:
    def optional_int(name: str) -> int | None:
        value = entry.get(name)
        return int(value) if isinstance(value, int | str) and str(value).isdigit() else None

    tail = entry.get("tail_offset")
    return StreamInfo(
        stream_id=str(entry["stream_id"]),
        status=entry.get("status"),
        content_type=entry.get("content_type"),
        tail_offset=str(tail) if tail is not None else None,
        created_at_ms=optional_int("created_at_ms"),
        last_write_at_ms=optional_int("last_write_at_ms"),
        raw=dict(entry),
    )
