"""Every error the client raises, written out once.

    DurableStreamsError
    ├── TransportError              the request never got an HTTP answer
    │   ├── ConnectError            could not connect (refused, DNS, TLS), or the connection broke
    │   │   └── NotConnected        no connection was made: nothing was sent
    │   └── TimeoutError            connect or read timeout
    ├── CertificateError            the server's TLS certificate is not trusted (never retried)
    ├── ResponseError               an answer that breaks the protocol (missing header, bad framing)
    ├── ProducerClosed              ``send`` on a producer that was closed or has failed
    └── HTTPStatusError             the server answered with an error status
        ├── BadRequest              400  malformed request (offset, headers, body)
        ├── Unauthorized            401
        ├── Forbidden               403
        │   └── ProducerFenced      403 + Producer-Epoch: a newer epoch owns the producer id
        ├── NotFound                404  no such stream / bucket / snapshot
        ├── Conflict                409  config mismatch, Stream-Seq regression, bucket not empty
        │   ├── StreamClosed        409 + Stream-Closed: the stream no longer accepts appends
        │   └── SequenceGap         409 + Producer-Expected-Seq: a producer batch arrived early
        ├── Gone                    410  offset before the retained history (``earliest_offset``): use /bootstrap
        ├── PreconditionFailed      412  a conditional append's If-Match was not the tail (``current_offset``)
        ├── PayloadTooLarge         413
        ├── RateLimited             429  (``retry_after`` seconds when the server said)
        └── ServerError             5xx  (503: ``retry_after`` too)

Status errors carry the method, URL, status, the server's message (our server's JSON body
``{"error": {"code", "message"}}`` or a text body such as the reference server's) and the
protocol headers a caller may need to react (``Stream-Next-Offset`` on a closed stream,
``Producer-Epoch`` on fencing), so callers branch on types, never on message text.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping

__all__ = [
    "BadRequest",
    "CertificateError",
    "Conflict",
    "ConnectError",
    "DurableStreamsError",
    "Forbidden",
    "Gone",
    "HTTPStatusError",
    "NotConnected",
    "NotFound",
    "PayloadTooLarge",
    "PreconditionFailed",
    "ProducerClosed",
    "ProducerFenced",
    "RateLimited",
    "ResponseError",
    "SequenceGap",
    "ServerError",
    "StreamClosed",
    "TimeoutError",
    "TransportError",
    "Unauthorized",
    "error_for_status",
]

_MAX_MESSAGE_CHARS = 500


class DurableStreamsError(Exception):
    """Base of every error raised by this client."""


class TransportError(DurableStreamsError):
    """No HTTP answer: the connection failed or timed out. Safe to retry idempotent calls."""

    def __init__(self, message: str, *, method: str, url: str) -> None:
        super().__init__(f"{method} {url}: {message}")
        self.method = method
        self.url = url


class ConnectError(TransportError):
    pass


class NotConnected(ConnectError):
    """No connection was made (refused, unknown host), so the server cannot have seen the request."""


class TimeoutError(TransportError, builtins.TimeoutError):
    pass


class CertificateError(DurableStreamsError):
    """TLS verification refused the server's certificate. Not a ``TransportError``: retrying
    cannot help, so readers and producers fail at once instead of backing off until their
    deadline. Trust a private CA or a self-signed certificate with ``Client(verify=<file>)``."""

    def __init__(self, message: str, *, method: str, url: str) -> None:
        super().__init__(
            f"{method} {url}: the server's TLS certificate is not trusted ({message}); pass the CA or "
            "self-signed certificate file as verify= (CLI: --ca-cert, Spark: option caCertFile)"
        )
        self.method = method
        self.url = url


class ResponseError(DurableStreamsError):
    """The server answered, but not as the protocol says it must (e.g. a read without Stream-Next-Offset)."""


class ProducerClosed(DurableStreamsError):
    """The producer was closed, or stopped after an error it could not recover from (see ``__cause__``)."""


class HTTPStatusError(DurableStreamsError):
    """The server answered with a status the operation does not accept."""

    status: int = 0

    def __init__(
        self, *, method: str, url: str, status: int, message: str, code: str | None, headers: Mapping[str, str]
    ) -> None:
        self.method = method
        self.url = url
        self.status = status
        self.message = message
        self.code = code
        self.headers = dict(headers)
        detail = f" [{code}]" if code else ""
        super().__init__(f"{status}{detail} for {method} {url}: {message or '(no message)'}")

    @property
    def retry_after(self) -> float | None:
        """Seconds from the Retry-After header (delay-seconds form only), or None. Servers send
        it with 429 and 503; retries wait at least this long."""
        raw = _lower(self.headers).get("retry-after", "")
        try:
            return max(0.0, float(raw))
        except ValueError:
            return None


class BadRequest(HTTPStatusError):
    status = 400


class Unauthorized(HTTPStatusError):
    status = 401


class Forbidden(HTTPStatusError):
    status = 403


class ProducerFenced(Forbidden):
    """A producer with this id and a newer epoch exists; ``current_epoch`` is the server's epoch."""

    @property
    def current_epoch(self) -> int | None:
        return _int_header(self.headers, "Producer-Epoch")


class NotFound(HTTPStatusError):
    status = 404


class Conflict(HTTPStatusError):
    status = 409


class StreamClosed(Conflict):
    """Appending to a closed stream; ``final_offset`` is its tail."""

    @property
    def final_offset(self) -> str | None:
        return _lower(self.headers).get("stream-next-offset")


class SequenceGap(Conflict):
    """A producer batch arrived before its predecessor; ``expected_seq`` is what the server wants next."""

    @property
    def expected_seq(self) -> int | None:
        return _int_header(self.headers, "Producer-Expected-Seq")

    @property
    def received_seq(self) -> int | None:
        return _int_header(self.headers, "Producer-Received-Seq")


class Gone(HTTPStatusError):
    """The offset asked for is below what the stream retains (a snapshot, or a retention policy, let
    go of it), or the stream was deleted. ``earliest_offset``: the first offset still readable, when
    the server said (``Stream-Earliest-Offset``)."""

    status = 410

    @property
    def earliest_offset(self) -> str | None:
        return _lower(self.headers).get("stream-earliest-offset")


class PreconditionFailed(HTTPStatusError):
    """A conditional append (``if_match=``) named an offset that is not the stream's tail: nothing was
    stored. ``current_offset`` is the tail the server compared with (append there to try again)."""

    status = 412

    @property
    def current_offset(self) -> str | None:
        lowered = _lower(self.headers)
        offset = lowered.get("stream-next-offset")
        return offset if offset is not None else _unquoted(lowered.get("etag"))


class PayloadTooLarge(HTTPStatusError):
    status = 413


class RateLimited(HTTPStatusError):
    status = 429


class ServerError(HTTPStatusError):
    status = 500


TRANSIENT: tuple[type[DurableStreamsError], ...] = (TransportError, ServerError, RateLimited)
"""Failures that say nothing about the request itself: retried (reads from where they got to,
producer appends with the same triple) until a backoff's deadline."""

ANSWERED_LATER: tuple[type[DurableStreamsError], ...] = (ServerError, RateLimited)
"""Failures where the server answered "not now" (5xx, 429: a shard moving between cluster nodes,
an overloaded server): lookups (HEAD) retry these until the backoff's deadline, while a server
that does not answer at all fails a lookup at once, so a wrong URL is reported without a wait."""


def not_processed(exc: BaseException) -> bool:
    """Whether the failure proves the server did not act on the request: no connection was made,
    or the server refused it for now (``429``, or ``503`` with ``Retry-After`` and no in-doubt
    code). Only these are retried for requests that are not idempotent (plain appends)."""
    if isinstance(exc, NotConnected | RateLimited):
        return True
    if isinstance(exc, ServerError) and exc.code in IN_DOUBT_CODES:
        return False
    return isinstance(exc, ServerError) and exc.status == 503 and exc.retry_after is not None


IN_DOUBT_CODES = frozenset({"COMMIT_IN_DOUBT", "RELAY_IN_DOUBT"})
"""Error codes of answers that say the request may have been stored (``COMMIT_IN_DOUBT``: a
Delta commit that failed may land later; ``RELAY_IN_DOUBT``: a cluster node lost the shard
server's answer), whatever their status and ``Retry-After``: never proof it was not processed."""


_BY_STATUS: dict[int, type[HTTPStatusError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    412: PreconditionFailed,
    413: PayloadTooLarge,
    429: RateLimited,
}


def error_for_status(*, method: str, url: str, status: int, headers: Mapping[str, str], body: bytes) -> HTTPStatusError:
    """The most specific error for an error answer; protocol headers pick the 403/409 subtypes."""
    lowered = _lower(headers)
    cls: type[HTTPStatusError]
    if status == 403 and "producer-epoch" in lowered:
        cls = ProducerFenced
    elif status == 409 and lowered.get("stream-closed", "").lower() == "true":
        cls = StreamClosed
    elif status == 409 and "producer-expected-seq" in lowered:
        cls = SequenceGap
    elif status >= 500:
        cls = ServerError
    else:
        cls = _BY_STATUS.get(status, HTTPStatusError)
    code, message = _parse_body(body)
    return cls(method=method, url=url, status=status, message=message, code=code, headers=headers)


def _parse_body(body: bytes) -> tuple[str | None, str]:
    """(code, message) from ``{"error": {"code", "message"}}``, else the body as text."""
    text = body[: _MAX_MESSAGE_CHARS * 4].decode("utf-8", errors="replace").strip()
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict):
        code = error.get("code")
        return (str(code) if code is not None else None), str(error.get("message", ""))[:_MAX_MESSAGE_CHARS]
    if isinstance(error, str):
        return None, error[:_MAX_MESSAGE_CHARS]
    return None, text[:_MAX_MESSAGE_CHARS]


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def _unquoted(etag: str | None) -> str | None:
    if etag is None or len(etag) < 2 or not (etag.startswith('"') and etag.endswith('"')):
        return None
    return etag[1:-1]


def _int_header(headers: Mapping[str, str], name: str) -> int | None:
    raw = _lower(headers).get(name.lower())
    return int(raw) if raw is not None and raw.isdigit() else None
