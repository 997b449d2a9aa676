"""A handle on one stream URL: create, append, close, delete, metadata, forks, reads.

A ``Stream`` is cheap and holds no connection; it is the URL plus the client's transport.
Every method takes ``headers=`` (e.g. a different ``Authorization``) and ``timeout=`` to
override the client's defaults for that call only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests

from . import errors
from ._http import HTTP, USE_DEFAULT, Backoff, Timeout, UseDefault, flag, header
from .appends import AppendOptions, append_result, body_bytes, encode_json_batch, if_match_value
from .bootstrap import Bootstrap, follow
from .delivery import append_retry_rule, retrying
from .errors import ResponseError
from .models import ARROW_STREAM, AppendResult, CreateResult, Message, Retention, Snapshot, StreamMetadata, is_json
from .read_framing import ReadFraming, probe_framing
from .read_plans import ReadPlan, fetch_plan
from .reading import BEGINNING, LiveMode, StreamReader
from .retention import RetentionPolicy
from .snapshots import Snapshots
from .time_lookup import TimeLookup, lookup_time

if TYPE_CHECKING:
    from typing import Unpack

    from .arrow import ArrowReader


class Stream:
    def __init__(self, transport: HTTP, url: str, *, content_type: str | None = None, backoff: Backoff) -> None:
        self.url = url
        self.content_type = content_type
        """The stream's content type once known (given, created, or learned from HEAD)."""
        self.transport = transport
        self._backoff = backoff
        self._bulk: bool | None = None
        self.snapshots = Snapshots(transport, url)
        """Publish, read and delete snapshots (protocol extensions)."""
        self.retention = RetentionPolicy(transport, url)
        """Change the stream's retention limits (our server's extension)."""

    def __repr__(self) -> str:
        return f"Stream({self.url!r})"

    @property
    def path(self) -> str:
        """The URL path, which is how ``Stream-Forked-From`` names a source."""
        return urlsplit(self.url).path

    # -- lifecycle -----------------------------------------------------------------------

    def create(
        self,
        content_type: str | None = None,
        *,
        data: bytes | str | None = None,
        ttl_seconds: int | None = None,
        expires_at: datetime | str | None = None,
        closed: bool = False,
        forked_from: Stream | str | None = None,
        fork_offset: str | None = None,
        fork_sub_offset: int | None = None,
        retention: Retention | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout | UseDefault = USE_DEFAULT,
    ) -> CreateResult:
        """Create the stream, or ensure it exists with this configuration (PUT is idempotent).

        ``created`` tells the two apart; a different existing configuration raises
        ``Conflict``. With ``forked_from`` the new stream shares the source's messages up to
        ``fork_offset`` (default: the source's tail) and continues on its own after them.
        ``retention`` names the stream's retention limits (``client.retention``).
        """
        request: dict[str, str] = retention.headers() if retention is not None else {}
        if content_type is not None:
            request["Content-Type"] = content_type
        if ttl_seconds is not None:
            request["Stream-TTL"] = str(ttl_seconds)
        if expires_at is not None:
            request["Stream-Expires-At"] = expires_at.isoformat() if isinstance(expires_at, datetime) else expires_at
        if closed:
            request["Stream-Closed"] = "true"
        if forked_from is not None:
            request["Stream-Forked-From"] = forked_from.path if isinstance(forked_from, Stream) else forked_from
        if fork_offset is not None:
            request["Stream-Fork-Offset"] = fork_offset
        if fork_sub_offset is not None:
            request["Stream-Fork-Sub-Offset"] = str(fork_sub_offset)
        response = self._send("PUT", (200, 201), body_bytes(data), request, headers, timeout)
        self.content_type = header(response, "Content-Type") or content_type or self.content_type
        return CreateResult(
            created=response.status_code == 201,
            content_type=self.content_type or "",
            next_offset=header(response, "Stream-Next-Offset"),
            closed=flag(response, "Stream-Closed"),
        )

    def delete(self, *, headers: Mapping[str, str] | None = None, timeout: Timeout | UseDefault = USE_DEFAULT) -> None:
        self._send("DELETE", (200, 204), None, {}, headers, timeout)

    def metadata(
        self, *, headers: Mapping[str, str] | None = None, timeout: Timeout | UseDefault = USE_DEFAULT
    ) -> StreamMetadata:
        """HEAD: tail offset, content type, TTL / expiry, closure, latest snapshot offset. Answers
        saying "later" (``errors.ANSWERED_LATER``) are asked again until the backoff's deadline."""
        response = retrying(
            lambda: self._send("HEAD", (200,), None, {}, headers, timeout),
            backoff=self._backoff,
            retry=lambda exc: isinstance(exc, errors.ANSWERED_LATER),
        )
        next_offset = header(response, "Stream-Next-Offset")
        if next_offset is None:
            raise ResponseError(f"HEAD {self.url} answered without Stream-Next-Offset")
        ttl = header(response, "Stream-TTL")
        self.content_type = header(response, "Content-Type") or ""
        return StreamMetadata(
            content_type=self.content_type,
            next_offset=next_offset,
            closed=flag(response, "Stream-Closed"),
            ttl_seconds=int(ttl) if ttl is not None and ttl.isdigit() else None,
            expires_at=header(response, "Stream-Expires-At"),
            snapshot_offset=header(response, "Stream-Snapshot-Offset"),
            incarnation=header(response, "Stream-Incarnation"),
            bulk_append=header(response, "Stream-Bulk-Append") == ARROW_STREAM,
            earliest_offset=header(response, "Stream-Earliest-Offset"),
            flushed_offset=header(response, "Stream-Flushed-Offset"),
            retained_bytes=int(retained) if (retained := header(response, "Stream-Retained-Bytes")) else None,
            retention=Retention.from_headers(lambda name: header(response, name)),
        )

    # -- writes --------------------------------------------------------------------------

    def append(
        self,
        data: bytes | str,
        *,
        seq: str | None = None,
        if_match: str | None = None,
        close: bool = False,
        retry: bool = False,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout | UseDefault = USE_DEFAULT,
    ) -> AppendResult:
        """Append bytes (str is sent as UTF-8) as one message; ``close=True`` also closes the stream.

        ``if_match`` makes it a conditional append (our server's extension, HEAD's
        ``Stream-Conditional-Append``): stored only if the stream's tail is that offset (a
        ``Stream-Next-Offset``, or an append's quoted ``ETag`` as it came), else
        ``PreconditionFailed`` carrying the ``current_offset``. Success's ``next_offset`` is the
        new tail, the ``if_match`` of a writer's next append. It is retried as a plain append is.

        ``seq`` is the protocol's ``Stream-Seq`` (lexicographic, strictly increasing). Retries
        (``delivery.append_retry_rule``): a failure that proves the append was not processed
        (connection refused, ``429``, ``503`` + ``Retry-After``) is retried; with ``seq`` every
        transient failure is (the server cannot store it twice); ``retry=True`` retries every
        transient failure even without ``seq`` (a message may then be stored twice). For
        retry-safe, batched writes use a ``Producer``.
        """
        body = body_bytes(data)
        if not body:
            raise ValueError("an append needs data; use close() to close without appending")
        options: AppendOptions = {
            "seq": seq,
            "if_match": if_match,
            "close": close,
            "retry": retry,
            "headers": headers,
            "timeout": timeout,
        }
        return self._append_body(body, {"Content-Type": self.resolve_content_type()}, options)

    def _append_body(self, body: bytes, request: dict[str, str], options: AppendOptions) -> AppendResult:
        seq, close, retry = options.get("seq"), options.get("close", False), options.get("retry", False)
        headers, timeout = options.get("headers"), options.get("timeout", USE_DEFAULT)
        if seq is not None:
            request["Stream-Seq"] = seq
        if close:
            request["Stream-Closed"] = "true"
        if_match = options.get("if_match")
        if if_match is not None:
            request["If-Match"] = if_match_value(if_match)
        # (a conditional append is retried as a plain one: only failures proving it was not processed)
        rule = append_retry_rule(stream_seq=seq is not None and if_match is None, retry=retry)
        response = retrying(
            lambda: self._send("POST", (200, 204), body, request, headers, timeout), backoff=self._backoff, retry=rule
        )
        return append_result(response)

    def append_many(self, messages: Iterable[bytes | str], **options: Unpack[AppendOptions]) -> AppendResult:
        """Append each item as its own message (JSON streams: each a JSON text), in order.

        Where the server takes bulk appends (``client.bulk``; learned with one HEAD) this is
        one request: all messages or none, each with its own offset, bytes and boundaries
        exactly kept. Elsewhere it falls back to plain appends: one JSON array for a JSON
        stream (also all or none), one request per message for other streams (then not
        atomic; ``seq`` and ``if_match`` are refused there, ``close`` goes with the last message).
        """
        items = [body_bytes(message) or b"" for message in messages]
        if not items or not all(items):
            raise ValueError("append_many needs at least one message, and no empty one")
        if self.supports_bulk():
            from . import bulk

            return self._append_body(bulk.body(items), bulk.headers(self.resolve_content_type()), options)
        if self.is_json:
            return self.append(b"[" + b",".join(items) + b"]", **options)
        if options.get("seq") is not None or options.get("if_match") is not None:
            raise ValueError(
                f"append_many with seq or if_match: {self.url} takes no bulk appends, and one Stream-Seq or "
                "If-Match cannot cover a message per request"
            )
        last: AppendOptions = {**options}
        options.pop("close", None)
        for item in items[:-1]:
            self.append(item, **options)
        return self.append(items[-1], **last)

    def supports_bulk(self) -> bool:
        """Whether the server takes bulk appends on this stream (one HEAD, then remembered),
        and ``pyarrow`` is there to encode them."""
        if self._bulk is None:
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                self._bulk = False
            else:
                self._bulk = self.metadata().bulk_append
        return self._bulk

    def append_json(self, value: Any, **options: Unpack[AppendOptions]) -> AppendResult:
        """Append one JSON value as one message (arrays too: it is wrapped, see ``encode_json_batch``)."""
        self._require_json("append_json")
        return self.append(encode_json_batch([value]), **options)

    def append_json_batch(self, values: Iterable[Any], **options: Unpack[AppendOptions]) -> AppendResult:
        """Append each value as its own message, atomically, in one request."""
        self._require_json("append_json_batch")
        return self.append(encode_json_batch(values), **options)

    def _require_json(self, method: str) -> None:
        """JSON appends to another stream would store the JSON text as opaque bytes: refused."""
        content_type = self.resolve_content_type()
        if not is_json(content_type):
            raise ValueError(
                f"{method}: the stream {self.url} is {content_type!r}, not JSON; "
                "append its bytes with append() (or create the stream as application/json)"
            )

    def close(
        self,
        data: bytes | str | None = None,
        *,
        if_match: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout | UseDefault = USE_DEFAULT,
    ) -> AppendResult:
        """Close the stream (EOF for readers), appending ``data`` as the final message if given.

        Closing a closed stream without data succeeds again (so a close-only request is retried
        on every transient failure, conditional or not); with data it raises ``StreamClosed``.
        ``if_match``: close (and append) only at that tail, as ``append``'s.
        """
        if data is not None:
            return self.append(data, close=True, if_match=if_match, headers=headers, timeout=timeout)
        request = {"Stream-Closed": "true"}
        if if_match is not None:
            request["If-Match"] = if_match_value(if_match)
        response = retrying(
            lambda: self._send("POST", (200, 204), None, request, headers, timeout),
            backoff=self._backoff,
            retry=append_retry_rule(stream_seq=False, retry=True),
        )
        return append_result(response)

    # -- reads ---------------------------------------------------------------------------

    def read(
        self,
        offset: str = BEGINNING,
        *,
        live: LiveMode | None = None,
        boundaries: bool = True,
        cursor: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout | UseDefault = USE_DEFAULT,
    ) -> StreamReader:
        """Messages from ``offset`` (``"-1"`` = the beginning, ``"now"`` = the current tail).

        ``live=None`` stops once caught up; ``"long-poll"`` or ``"sse"`` follow the stream
        until it is closed. ``boundaries`` asks for one item per message (multipart reads)
        where the server supports it; other servers give JSON items or byte chunks.
        """
        return StreamReader(
            self.transport,
            self.url,
            offset=offset,
            live=live,
            boundaries=boundaries,
            content_type=self.content_type,
            cursor=cursor,
            headers=headers,
            timeout=timeout,
            backoff=self._backoff,
        )

    def read_arrow(
        self,
        offset: str = BEGINNING,
        *,
        end: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout | UseDefault = USE_DEFAULT,
    ) -> ArrowReader:
        """Catch-up read in Arrow tables, up to the tail or to ``end`` (our server's
        extension; needs ``pyarrow``)."""
        from .arrow import ArrowReader

        return ArrowReader(
            self.transport, self.url, offset=offset, end=end, headers=headers, timeout=timeout, backoff=self._backoff
        )

    def read_plan(
        self,
        offset: str = BEGINNING,
        *,
        end: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout | UseDefault = USE_DEFAULT,
    ) -> ReadPlan:
        """Where ``[offset, end)`` is stored: Delta files and row groups, and where HTTP takes over
        (our server's extension; ``PlansUnavailable`` elsewhere, see ``read_plans``)."""
        return fetch_plan(self.transport, self.url, offset, end, headers=headers, timeout=timeout)

    def offset_at(
        self,
        timestamp_ms: int,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout | UseDefault = USE_DEFAULT,
    ) -> TimeLookup:
        """The first offset appended at or after ``timestamp_ms`` (our server's extension;
        ``TimeLookupUnavailable`` elsewhere, see ``time_lookup``)."""
        return lookup_time(self.transport, self.url, timestamp_ms, headers=headers, timeout=timeout)

    def read_framing(
        self, offset: str, *, headers: Mapping[str, str] | None = None, timeout: Timeout | UseDefault = USE_DEFAULT
    ) -> ReadFraming:
        """``arrow``, ``multipart`` (each message with its own offset) or ``plain``: one read at
        ``offset`` (the tail keeps it empty) tells (``read_framing``)."""
        return probe_framing(self.transport, self.url, offset, headers=headers, timeout=timeout)

    def bootstrap(
        self, *, headers: Mapping[str, str] | None = None, timeout: Timeout | UseDefault = USE_DEFAULT
    ) -> Bootstrap:
        """``GET /bootstrap``: the latest snapshot plus every retained message after it."""
        return Bootstrap.fetch(self.transport, self.url, headers=headers, timeout=timeout)

    def follow(
        self,
        offset: str = BEGINNING,
        *,
        on_snapshot: Callable[[Snapshot | None], None],
        live: LiveMode | None = "sse",
        headers: Mapping[str, str] | None = None,
        timeout: Timeout | UseDefault = USE_DEFAULT,
    ) -> Iterator[Message]:
        """Like ``read``, but a ``410 Gone`` (history before ``offset`` was dropped) rebuilds
        from ``/bootstrap`` instead of failing: ``on_snapshot`` is called with the snapshot
        (None if there is none) so the caller can reset its state, the messages after the
        snapshot are yielded, and reading continues from the bootstrap's next offset."""
        return follow(
            partial(self.read, live=live, headers=headers, timeout=timeout),
            partial(self.bootstrap, headers=headers, timeout=timeout),
            offset,
            on_snapshot=on_snapshot,
            live=live is not None,
        )

    # -- plumbing ------------------------------------------------------------------------

    def resolve_content_type(self) -> str:
        """The content type appends must carry: known already, or learned with one HEAD."""
        if self.content_type is None:
            self.metadata()
        assert self.content_type is not None
        return self.content_type

    @property
    def is_json(self) -> bool:
        return is_json(self.resolve_content_type())

    def _send(
        self,
        method: str,
        ok: tuple[int, ...],
        body: bytes | None,
        request_headers: Mapping[str, str],
        headers: Mapping[str, str] | None,
        timeout: Timeout | UseDefault,
    ) -> requests.Response:
        merged = {**request_headers, **(headers or {})}
        return self.transport.request(method, self.url, ok=ok, headers=merged, content=body, timeout=timeout)
