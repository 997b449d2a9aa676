"""Every protocol error the server can answer with, written out once.

Each error carries its HTTP status, a stable machine-readable ``code``, a human message,
any protocol headers the spec requires on that response (``Stream-Closed``,
``Producer-Expected-Seq`` ...) and, for refusals that pass, ``retry_after_s``: when to
try again. ``rendered`` turns one into what is sent: a JSON body ``{"error": {"code": ...,
"message": ...}}`` plus those headers and ``Retry-After``; it is the one rendering of every
error the server says, on every path (the app's responses, ``http.responses.error_response``,
and the fast path through it; a cluster node's router, ``cluster.node.router``). Nothing else
decides statuses.

    ProtocolError
    ├── BadRequest             400  malformed headers, offsets, bodies, parameters
    ├── Unauthorized           401  no valid bearer token (when auth is on)
    ├── Forbidden              403  stale producer epoch (zombie fencing); a token outside its scope
    ├── NotFound               404  no such stream
    ├── MethodNotAllowed       405
    ├── RequestTimeout         408  the request body did not arrive in time
    ├── Conflict               409  config mismatch, closed stream, sequence problems; a full bucket
    ├── Gone                   410  offset before the retained history / soft-deleted stream
    ├── PreconditionFailed     412  a conditional append's If-Match did not name the tail
    ├── PayloadTooLarge        413
    ├── RangeNotSatisfiable    416  a file's byte range that starts past its end
    ├── UnsupportedMediaType   415
    ├── TooManyRequests        429  over the per-client rate limit
    ├── HeadersTooLarge        431  request line + headers over the limit
    ├── BadGateway             502  a cluster node's relay lost the answer of a request it sent
    └── ServiceUnavailable     503  storage cannot accept writes right now; too many live readers;
                                    a cluster's shard moving
"""

from __future__ import annotations

import json
from collections.abc import Mapping


class ProtocolError(Exception):
    status: int = 500
    default_code: str = "INTERNAL_ERROR"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.headers: dict[str, str] = dict(headers or {})
        self.retry_after_s = retry_after_s
        """Seconds after which a retry may succeed (rendered as ``Retry-After``)."""


class Moved(ProtocolError):
    """Served elsewhere: a 307 to the ``Location`` header (the method and body are kept)."""

    status = 307
    default_code = "MOVED"


class BadRequest(ProtocolError):
    status = 400
    default_code = "BAD_REQUEST"


class Unauthorized(ProtocolError):
    status = 401
    default_code = "UNAUTHORIZED"


class Forbidden(ProtocolError):
    status = 403
    default_code = "FORBIDDEN"


class NotFound(ProtocolError):
    status = 404
    default_code = "NOT_FOUND"


class MethodNotAllowed(ProtocolError):
    status = 405
    default_code = "METHOD_NOT_ALLOWED"


class RequestTimeout(ProtocolError):
    status = 408
    default_code = "REQUEST_TIMEOUT"


class Conflict(ProtocolError):
    status = 409
    default_code = "CONFLICT"


class Gone(ProtocolError):
    status = 410
    default_code = "GONE"


class PreconditionFailed(ProtocolError):
    status = 412
    default_code = "PRECONDITION_FAILED"


class PayloadTooLarge(ProtocolError):
    status = 413
    default_code = "PAYLOAD_TOO_LARGE"


class RangeNotSatisfiable(ProtocolError):
    status = 416
    default_code = "RANGE_NOT_SATISFIABLE"


class UnsupportedMediaType(ProtocolError):
    status = 415
    default_code = "UNSUPPORTED_MEDIA_TYPE"


class TooManyRequests(ProtocolError):
    status = 429
    default_code = "RATE_LIMITED"


class HeadersTooLarge(ProtocolError):
    status = 431
    default_code = "HEADERS_TOO_LARGE"


class BadGateway(ProtocolError):
    status = 502
    default_code = "BAD_GATEWAY"


class ServiceUnavailable(ProtocolError):
    status = 503
    default_code = "SERVICE_UNAVAILABLE"


def rendered(error: ProtocolError) -> tuple[bytes, dict[str, str]]:
    """``error``'s JSON body and its headers (``Retry-After`` among them when it has one); its
    status is ``error.status``."""
    body = json.dumps({"error": {"code": error.code, "message": error.message}}).encode()
    headers = dict(error.headers)
    if error.retry_after_s is not None:
        headers["Retry-After"] = str(error.retry_after_s)
    return body, headers
