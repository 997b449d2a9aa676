"""Callback and claim tokens (§7.1, §7.3, §12.9): HMAC-signed, scoped to one wake.

A token is ``v1.<payload>.<mac>``: ``payload`` the unpadded base64url of a small JSON
object ``{"s": subscription key, "g": generation, "w": wake id, "k": kind}`` and ``mac``
HMAC-SHA256 over ``v1.<payload>`` with the server's token key (random, kept durably
with the signing keys). The server checks the MAC in constant time on every callback,
ack and release, then that ``s``, ``g`` and ``w`` are the subscription's *current* wake:
a token outlives nothing, fencing by generation is what expires it. Tokens travel only
in ``Authorization: Bearer`` and are never logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import NamedTuple

from .errors import Unauthorized

_VERSION = "v1"


class WakeClaim(NamedTuple):
    """What a token vouches for: subscription key, generation, wake id, token kind."""

    subscription: str
    generation: int
    wake_id: str
    kind: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue(key: bytes, claim: WakeClaim) -> str:
    payload = {"s": claim.subscription, "g": claim.generation, "w": claim.wake_id, "k": claim.kind}
    body = f"{_VERSION}.{_b64(json.dumps(payload, separators=(',', ':')).encode())}"
    mac = hmac.new(key, body.encode("ascii"), hashlib.sha256).digest()
    return f"{body}.{_b64(mac)}"


def verify(key: bytes, token: str) -> WakeClaim:
    """The claim a genuine token carries; 401 for anything forged, altered or malformed."""
    invalid = Unauthorized("the callback or claim token is not valid", code="INVALID_TOKEN")
    version, _, rest = token.partition(".")
    payload_b64, _, mac_b64 = rest.partition(".")
    if version != _VERSION or not payload_b64 or not mac_b64:
        raise invalid
    expected = hmac.new(key, f"{version}.{payload_b64}".encode("ascii", "replace"), hashlib.sha256).digest()
    try:
        mac = _unb64(mac_b64)
        if not hmac.compare_digest(mac, expected):
            raise invalid
        data = json.loads(_unb64(payload_b64))
        return WakeClaim(str(data["s"]), int(data["g"]), str(data["w"]), str(data["k"]))
    except (ValueError, KeyError, TypeError):
        raise invalid from None


def bearer(header: str | None) -> str:
    """The token of a single ``Authorization: Bearer <token>`` header; 401 without one."""
    if header is None:
        raise Unauthorized("send the callback or claim token as 'Authorization: Bearer <token>'", code="INVALID_TOKEN")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("the Authorization header must be 'Bearer <token>'", code="INVALID_TOKEN")
    return token.strip()
