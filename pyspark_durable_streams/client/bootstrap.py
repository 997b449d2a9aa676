"""``/bootstrap`` (extensions section 3) and rebuilding a reader after ``410 Gone``.

A bootstrap response is ``multipart/mixed``: the first part is the snapshot (an empty
``application/octet-stream`` part with ``Stream-Snapshot-Offset: -1`` when there is
none), every later part one retained message. Parts are parsed as they stream in, so a
long retained tail does not have to fit in memory; the snapshot itself is read whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import TracebackType

import requests

from . import errors
from ._framing import iter_parts, multipart_boundary
from ._http import HTTP, Timeout, UseDefault, flag, header
from .models import DEFAULT_CONTENT_TYPE, Message, Snapshot
from .reading import StreamReader, body_chunks, part_messages

NO_SNAPSHOT = "-1"


class Bootstrap:
    """An open bootstrap response: ``snapshot`` is read, ``messages`` stream lazily.

    Iterate ``messages`` before closing (it is a context manager), then keep reading the
    stream from ``next_offset``.
    """

    def __init__(self, response: requests.Response, snapshot: Snapshot | None, messages: Iterator[Message]) -> None:
        self._response = response
        self.snapshot = snapshot
        self.messages = messages
        next_offset = header(response, "Stream-Next-Offset")
        if next_offset is None:
            raise errors.ResponseError(f"GET {response.url} answered without Stream-Next-Offset")
        self.next_offset = next_offset
        self.up_to_date = flag(response, "Stream-Up-To-Date")

    @classmethod
    def fetch(
        cls, transport: HTTP, stream_url: str, *, headers: Mapping[str, str] | None, timeout: Timeout | UseDefault
    ) -> Bootstrap:
        url = stream_url.rstrip("/") + "/bootstrap"
        response = transport.request("GET", url, ok=(200,), headers=headers, timeout=timeout, stream=True)
        try:
            boundary = multipart_boundary(header(response, "Content-Type") or "")
            if boundary is None:
                raise errors.ResponseError(f"GET {url} answered {header(response, 'Content-Type')!r}, not multipart")
            parts = iter_parts(body_chunks(response), boundary)
            first = next(parts, None)
            if first is None:
                raise errors.ResponseError(f"GET {url} answered without the snapshot part")
            offset = header(response, "Stream-Snapshot-Offset") or NO_SNAPSHOT
            snapshot = None
            if offset != NO_SNAPSHOT:
                content_type = first.headers.get("content-type", DEFAULT_CONTENT_TYPE)
                snapshot = Snapshot(offset=offset, content_type=content_type, data=first.body)
            end = header(response, "Stream-Next-Offset") or ""
            return cls(response, snapshot, part_messages(parts, None, end, url))
        except BaseException:
            response.close()
            raise

    def close(self) -> None:
        self._response.close()

    def __enter__(self) -> Bootstrap:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def follow(
    read: Callable[[str], StreamReader],
    bootstrap: Callable[[], Bootstrap],
    offset: str,
    *,
    on_snapshot: Callable[[Snapshot | None], None],
    live: bool,
) -> Iterator[Message]:
    """See ``Stream.follow``: ``read(offset)``, and on ``Gone`` rebuild from ``bootstrap()``
    and go on (a stream's own methods, passed in so that this module needs no ``Stream``)."""
    while True:
        reader = read(offset)
        try:
            yield from reader
            return
        except errors.Gone:
            pass
        finally:
            reader.close()
        with bootstrap() as boot:
            on_snapshot(boot.snapshot)
            yield from boot.messages
            offset = boot.next_offset
        if not live and boot.up_to_date:
            return
