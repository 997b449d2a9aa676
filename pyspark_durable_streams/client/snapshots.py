"""Snapshots (extensions section 2): the folded state of a stream before an offset.

Publishing a snapshot moves the stream's retention point: reads before its offset then
answer ``410 Gone`` and readers rebuild from ``/bootstrap`` (see ``bootstrap.py``).
Offsets go into the URL path, so they are always percent-encoded here.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

import requests

from ._http import HTTP, USE_DEFAULT, Timeout, UseDefault, flag, header, quote_segment
from .errors import NotFound
from .models import DEFAULT_CONTENT_TYPE, Snapshot


class Snapshots:
    """The snapshot resources of one stream: ``{stream}/snapshot[/{offset}]``."""

    def __init__(self, transport: HTTP, stream_url: str) -> None:
        self._transport = transport
        self._base = stream_url.rstrip("/") + "/snapshot"

    def publish(
        self,
        offset: str,
        data: bytes,
        *,
        content_type: str = DEFAULT_CONTENT_TYPE,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout | UseDefault = USE_DEFAULT,
    ) -> None:
        """Publish ``data`` as the state of everything before ``offset`` (a Stream-Next-Offset)."""
        merged = {"Content-Type": content_type, **(headers or {})}
        self._transport.request(
            "PUT", self._url(offset), ok=(200, 201, 204), headers=merged, content=data, timeout=timeout
        )

    def latest(
        self, *, headers: Mapping[str, str] | None = None, timeout: Timeout | UseDefault = USE_DEFAULT
    ) -> Snapshot | None:
        """The latest visible snapshot (following the server's 307), or None when there is none.

        The protocol answers 404 both for "no snapshot" and "no stream"; use
        ``Stream.metadata()`` first when the difference matters.
        """
        try:
            response = self._transport.request("GET", self._base, ok=(200,), headers=headers, timeout=timeout)
        except NotFound:
            return None
        return _snapshot(response)

    def get(
        self, offset: str, *, headers: Mapping[str, str] | None = None, timeout: Timeout | UseDefault = USE_DEFAULT
    ) -> Snapshot:
        response = self._transport.request("GET", self._url(offset), ok=(200,), headers=headers, timeout=timeout)
        return _snapshot(response)

    def delete(
        self, offset: str, *, headers: Mapping[str, str] | None = None, timeout: Timeout | UseDefault = USE_DEFAULT
    ) -> None:
        """Delete a superseded snapshot; the latest one cannot be deleted (``Conflict``)."""
        self._transport.request("DELETE", self._url(offset), ok=(200, 204), headers=headers, timeout=timeout)

    def _url(self, offset: str) -> str:
        return f"{self._base}/{quote_segment(offset)}"


def _snapshot(response: requests.Response) -> Snapshot:
    offset = header(response, "Stream-Snapshot-Offset") or unquote(urlsplit(response.url).path.rsplit("/", 1)[-1])
    return Snapshot(
        offset=offset,
        content_type=header(response, "Content-Type") or DEFAULT_CONTENT_TYPE,
        data=response.content,
        next_offset=header(response, "Stream-Next-Offset"),
        up_to_date=flag(response, "Stream-Up-To-Date"),
    )
