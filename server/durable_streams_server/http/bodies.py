"""Request bodies of a stream URL: read whole within the size limit and the request's deadline,
their bytes admitted to the memory budget before they are read (``engine.memory_writes``).

Two ways in: ``read`` takes a body as it arrives (Starlette's stream, or the fast path's
chunks), ``received`` one that had all arrived before the handler ran (the fast path's). Both
answer 413 over the limit with the same message; the request's end releases what was admitted
(``request_policy.RequestPolicy.end``, from the scope's ``WRITE_BYTES_KEY``/``WRITES_KEY``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.types import Scope

from ..engine.memory_writes import WriteAdmission
from ..protocol.errors import PayloadTooLarge
from .limits import WRITE_BYTES_KEY, WRITES_KEY, BodyDeadline, HttpLimits

_DECIMAL_RE = re.compile(r"[0-9]{1,19}")


class RequestBodies:
    def __init__(self, limits: HttpLimits, writes: WriteAdmission | None = None) -> None:
        self.limits = limits
        self.writes = writes
        """The memory budget's admission of request bodies; ``None``: none."""

    async def of(self, request: Request) -> bytes:
        """A Starlette request's whole body."""
        return await self.read(request.headers.get("content-length"), request.stream(), request.scope)

    async def received(self, body: bytes, scope: Scope) -> bytes:
        """A body that had all arrived before the handler ran (the fast path's): ``read``'s
        limit and admission, and no deadline left to keep."""
        if len(body) > self.limits.max_body_bytes:
            raise self._too_large()
        if self.writes is not None and body:
            await _admit(self.writes, scope, len(body))
        return body

    async def read(self, declared: str | None, chunks: AsyncIterator[bytes], scope: Scope) -> bytes:
        """The whole body (``declared``: its Content-Length): 413 over the limit, 408 when
        it does not arrive in time. Its bytes are admitted (``writes``) before they are read:
        the declared length at once, a body of unknown length as it arrives."""
        limit = self.limits.max_body_bytes
        admitted = int(declared) if declared is not None and _DECIMAL_RE.fullmatch(declared) else 0
        if admitted > limit:
            raise self._too_large()
        writes = self.writes
        if writes is not None and admitted:
            await _admit(writes, scope, admitted)  # (waits while writes in flight fill their share)
        parts: list[bytes] = []
        size = 0
        with BodyDeadline(self.limits.request_timeout_s):
            async for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise self._too_large()
                if writes is not None and size > admitted:
                    await _admit(writes, scope, size - admitted)
                    admitted = size
                parts.append(chunk)
        return b"".join(parts)

    def _too_large(self) -> PayloadTooLarge:
        """The one 413 of a body over the limit, whichever way it was read."""
        return PayloadTooLarge(f"request body exceeds {self.limits.max_body_bytes} bytes")


async def _admit(writes: WriteAdmission, scope: Scope, nbytes: int) -> None:
    """Admit ``nbytes`` of a request's body, counted in its scope with the admission that admitted
    them until the request ends (``request_policy.RequestPolicy.end`` releases them)."""
    if not writes.try_admit(nbytes):
        await writes.admit(nbytes)
    scope[WRITE_BYTES_KEY] = scope.get(WRITE_BYTES_KEY, 0) + nbytes
    scope[WRITES_KEY] = writes
