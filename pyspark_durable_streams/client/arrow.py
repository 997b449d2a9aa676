"""Catch-up reads in Arrow: our server's ``Accept: application/vnd.apache.arrow.stream`` extension.

Each response is an Arrow IPC stream with one row per message (``seq``, ``ts``, ``data``),
so a reader that moves many messages (the Spark source) never makes a Python object per
message. Servers without the extension answer with their ordinary body, which is an error
here: callers probe first (``supports_arrow``) and use ``Stream.read`` elsewhere.

This module needs ``pyarrow`` (installed with the ``spark`` extra); the rest of the client
does not import it.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
import requests

from . import errors
from ._http import HTTP, Backoff, Timeout, UseDefault, flag, header, whole_body
from .models import ARROW_STREAM, media_type
from .reading import BEGINNING, Retrying

__all__ = ["ARROW_STREAM", "ArrowReader", "ArrowSlice", "supports_arrow"]


@dataclass(frozen=True)
class ArrowSlice:
    """One response: the messages from ``start`` up to ``next_offset``.

    ``table`` has columns ``seq`` (int64: a message's offset is ``f"{seq:016d}_0000000000000000"``,
    except a first message read from ``start`` inside it, whose offset is ``start``), ``ts``
    (timestamp[us, UTC]: append time) and ``data`` (binary: the exact bytes).
    """

    start: str
    next_offset: str
    content_type: str
    table: pa.Table


def supports_arrow(response: requests.Response) -> bool:
    return media_type(response.headers.get("Content-Type")) == ARROW_STREAM


class ArrowReader(Iterator[ArrowSlice]):
    """Every message from ``offset`` to the tail as it is when each response is made, or
    only those before ``end`` (an offset): the server then sends nothing beyond it."""

    def __init__(
        self,
        transport: HTTP,
        url: str,
        *,
        offset: str = BEGINNING,
        end: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout | UseDefault,
        backoff: Backoff,
    ) -> None:
        self._transport = transport
        self._url = url
        self._end = end
        self._headers = {**(headers or {}), "Accept": ARROW_STREAM}
        self._timeout = timeout
        self._backoff = backoff
        self.offset = offset
        """Where a new read would continue without skipping anything handed out so far."""
        self._slices = self._run()

    def __next__(self) -> ArrowSlice:
        return next(self._slices)

    def _run(self) -> Generator[ArrowSlice, None, None]:
        retry = Retrying(self._backoff)
        while True:
            try:
                found, up_to_date = self._one_request()
            except Retrying.TRANSIENT as exc:
                retry.pause(exc)
                continue
            retry.progressed()
            self.offset = found.next_offset
            yield found
            if up_to_date or (self._end is not None and self.offset >= self._end):
                return

    def _one_request(self) -> tuple[ArrowSlice, bool]:
        params = {"offset": self.offset}
        if self._end is not None:
            params["end"] = self._end
        response = self._transport.request(
            "GET", self._url, ok=(200,), params=params, headers=self._headers, timeout=self._timeout, stream=True
        )
        with response:
            next_offset = header(response, "Stream-Next-Offset")
            if next_offset is None:
                raise errors.ResponseError(f"GET {response.url} answered 200 without Stream-Next-Offset")
            if not supports_arrow(response):
                raise errors.ResponseError(
                    f"GET {response.url}: the server answered {header(response, 'Content-Type')!r}, not Arrow "
                    f"(it lacks the {ARROW_STREAM} read extension)"
                )
            body = whole_body(response, "GET")
        try:
            table = pa.ipc.open_stream(body).read_all()
        except pa.ArrowInvalid as exc:
            raise errors.ResponseError(f"GET {response.url}: malformed Arrow body: {exc}") from exc
        content_type = (table.schema.metadata or {}).get(b"content_type", b"").decode()
        found = ArrowSlice(self.offset, next_offset, content_type, table.replace_schema_metadata(None))
        return found, flag(response, "Stream-Up-To-Date")
