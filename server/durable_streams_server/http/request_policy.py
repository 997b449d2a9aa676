"""One request policy for both paths: admit, observe, decorate.

Every HTTP request passes the same three steps, whichever path serves it -- the ASGI app's
gate (``gate.py``) or the fast path, from the connection's parser callbacks (``fastpath/``):

1. **admit** (``RequestPolicy.admit``): the server's own admission first, if it has one
   (``ports.Admission``: on a cluster's shard server, a path of another shard is sent back to the
   node's router with a 307); then auth when tokens are configured (401/403, ``auth.authorize``;
   not for a request the admission says is the cluster's own on its internal routes), then the
   limits (431 for heads over ``--max-header-bytes``, 429 over the rate limit:
   ``limits.RequestLimits``). A refusal is answered with the protocol's JSON
   error instead of routing (its route label: ``unrouted``).
2. **observe** (``begin`` ... ``end``): the request is counted in flight from its start; at its
   end, however it ended, its live-reader slot (a long-poll's or an SSE stream's, taken by
   the handler: ``limits.LiveReaders``) and the bytes of its body admitted by the memory budget
   (``engine.memory_writes``) are released, and it is observed with its route label,
   status and duration (``ServerMetrics.observe_scope``).
3. **decorate** (``decorate``, ``security_lines``): the security headers (CORS, ``nosniff`` ...)
   on every response, errors included; a header a response sets itself is left as it set it.
   The ASGI path adds them as header pairs, the fast path as pre-rendered lines of the head it
   writes: one decision (``missing_security_headers``), two renderings of it.
"""

from __future__ import annotations

import time

from starlette.responses import Response
from starlette.types import Scope

from ..engine.memory_writes import WriteAdmission
from ..protocol.errors import ProtocolError
from ..protocol.tokens import AuthConfig
from .auth import authorize
from .limits import WRITE_BYTES_KEY, WRITES_KEY, LiveReaders, RequestLimits
from .metrics import ServerMetrics
from .ports import Admission
from .responses import EXPOSED_HEADERS, error_response

Headers = list[tuple[bytes, bytes]]

SECURITY_HEADERS: Headers = [
    (b"access-control-allow-origin", b"*"),
    (b"access-control-expose-headers", EXPOSED_HEADERS.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"cross-origin-resource-policy", b"cross-origin"),
]
"""CORS and browser-hardening headers of every response, errors included."""
_SECURITY_NAMES = frozenset(name for name, _ in SECURITY_HEADERS)
_SECURITY_LINES = b"".join(b"%s: %s\r\n" % pair for pair in SECURITY_HEADERS)


def missing_security_headers(headers: Headers) -> Headers:
    """Those of ``SECURITY_HEADERS`` a response's ``headers`` do not set themselves (the list
    itself when they set none, the usual case)."""
    if not any(name.lower() in _SECURITY_NAMES for name, _ in headers):
        return SECURITY_HEADERS
    present = {name.lower() for name, _ in headers}
    return [(name, value) for name, value in SECURITY_HEADERS if name not in present]


def decorate(headers: Headers) -> Headers:
    """A response's header pairs with the security headers (the ASGI path's rendering)."""
    return headers + missing_security_headers(headers)


def security_lines(headers: Headers) -> bytes:
    """The security headers a response with ``headers`` gets, as lines of its head (the fast
    path's rendering; pre-rendered for a response that sets none)."""
    missing = missing_security_headers(headers)
    if missing is SECURITY_HEADERS:
        return _SECURITY_LINES
    return b"".join(b"%s: %s\r\n" % pair for pair in missing)


class RequestPolicy:
    """The steps every request passes (module docstring), for one app."""

    __slots__ = ("admission", "auth", "limits", "live_readers", "metrics")

    def __init__(
        self,
        auth: AuthConfig | None,
        limits: RequestLimits,
        metrics: ServerMetrics,
        live_readers: LiveReaders,
        admission: Admission | None = None,
    ) -> None:
        self.admission = admission
        self.auth = auth
        self.limits = limits
        self.metrics = metrics
        self.live_readers = live_readers

    def admit(self, scope: Scope) -> Response | None:
        """Admission, auth, then limits: the refusal to answer instead of routing, or ``None``: go on."""
        admission = self.admission
        refusal: ProtocolError | None = admission.refusal(scope) if admission is not None else None
        internal = admission is not None and admission.internal(scope)
        if refusal is None and self.auth is not None and not internal:
            refusal = authorize(self.auth, scope)
        if refusal is None:
            refusal = self.limits.refusal(scope)
        return error_response(refusal) if refusal is not None else None

    def begin(self) -> float:
        """A request starts: counted in flight; its start time, for ``end``."""
        self.metrics.in_flight += 1
        return time.perf_counter()

    def end(self, scope: Scope, status: int, started: float) -> None:
        """A request has ended (answered or not: ``status`` 500 unless a response started)."""
        metrics = self.metrics
        metrics.in_flight -= 1
        self.live_readers.release(scope)
        written = scope.pop(WRITE_BYTES_KEY, 0)
        if written:  # (admitted by the started app's ``WriteAdmission``, in the scope with them)
            writes: WriteAdmission = scope.pop(WRITES_KEY)
            writes.release(written)
        metrics.observe_scope(scope, status, time.perf_counter() - started)
