"""Signed file URLs: an HMAC over a path and an expiry, so a URL needs no bearer token.

Read plans of a table whose files the server serves itself (a local table, or one on an
object store without presigned URLs) point executors at the server's own file endpoint
(``/v1/files/<path>?expires=<unix s>&signature=<hex>``). The signature is
HMAC-SHA256(key, ``<path>\\n<expires>``); the key is random per server process, so a
restart invalidates every URL handed out (readers then ask for a new plan). Pure: the
caller passes the clock.
"""

from __future__ import annotations

import hashlib
import hmac

from .errors import Forbidden


def signature(key: bytes, path: str, expires: int) -> str:
    return hmac.new(key, f"{path}\n{expires}".encode(), hashlib.sha256).hexdigest()


def verify(key: bytes, path: str, expires: str | None, given: str | None, now_s: float) -> None:
    """Raise ``Forbidden`` unless ``given`` signs ``path`` until ``expires``, not yet past."""
    if expires is None or given is None or not expires.isascii() or not expires.isdigit():
        raise Forbidden("a file URL needs its 'expires' and 'signature' parameters", code="INVALID_SIGNATURE")
    if not hmac.compare_digest(signature(key, path, int(expires)), given):
        raise Forbidden("the file URL's signature is not valid (ask for a new read plan)", code="INVALID_SIGNATURE")
    if int(expires) <= now_s:
        raise Forbidden("the file URL has expired: ask for a new read plan", code="SIGNATURE_EXPIRED")
