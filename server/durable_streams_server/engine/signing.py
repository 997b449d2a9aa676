"""Webhook signing keys (§6.5, §7.1, §12.10): Ed25519 keys, the JWKS, signatures.

The key ring is generated once (first start) and kept in the subscription store, so the
``kid`` receivers pinned stays valid across restarts. ``kid`` is ``ds_`` + the RFC 7638
JWK thumbprint of the public key: stable, and derived from the key material. The ring
also holds the HMAC key for callback/claim tokens.

Rotation: ``rotate()`` makes a new key active; older keys stay in the JWKS (public part
only) until ``retire_before`` drops them, which an operator must only do once every
delivery signed with them is outside receivers' replay window (five minutes is typical).

``Webhook-Signature: t=<unix seconds>,kid=<kid>,ed25519=<base64url signature>`` signs
``<t>.<raw body>``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private: Ed25519PrivateKey
    created_ms: int

    @classmethod
    def generate(cls, now_ms: int) -> SigningKey:
        private = Ed25519PrivateKey.generate()
        return cls(kid_of(private), private, now_ms)

    def public_jwk(self) -> dict[str, str]:
        x = b64url(self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
        return {"kty": "OKP", "crv": "Ed25519", "kid": self.kid, "use": "sig", "alg": "EdDSA", "x": x}

    def to_json(self) -> dict[str, Any]:
        raw = self.private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return {"kid": self.kid, "d": b64url(raw), "created_ms": self.created_ms}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SigningKey:
        private = Ed25519PrivateKey.from_private_bytes(_unb64url(data["d"]))
        return cls(data["kid"], private, data["created_ms"])


def kid_of(private: Ed25519PrivateKey) -> str:
    x = b64url(private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
    canonical = json.dumps({"crv": "Ed25519", "kty": "OKP", "x": x}, separators=(",", ":"), sort_keys=True)
    return "ds_" + b64url(hashlib.sha256(canonical.encode()).digest())


class KeyRing:
    """The signing keys (the last is active) and the token HMAC key."""

    def __init__(self, keys: list[SigningKey], token_key: bytes) -> None:
        self.keys = keys
        self.token_key = token_key

    @classmethod
    def generate(cls, now_ms: int) -> KeyRing:
        return cls([SigningKey.generate(now_ms)], secrets.token_bytes(32))

    @property
    def active(self) -> SigningKey:
        return self.keys[-1]

    def rotate(self, now_ms: int) -> SigningKey:
        key = SigningKey.generate(now_ms)
        self.keys.append(key)
        return key

    def retire_before(self, created_ms: int) -> None:
        """Drop inactive keys created before ``created_ms`` (see the module doc)."""
        self.keys = [key for key in self.keys[:-1] if key.created_ms >= created_ms] + [self.active]

    def jwks(self) -> dict[str, Any]:
        return {"keys": [key.public_jwk() for key in self.keys]}

    def sign(self, timestamp: int, body: bytes) -> str:
        key = self.active
        signature = key.private.sign(str(timestamp).encode() + b"." + body)
        return f"t={timestamp},kid={key.kid},ed25519={b64url(signature)}"

    def to_json(self) -> dict[str, Any]:
        return {"signing_keys": [key.to_json() for key in self.keys], "token_key": b64url(self.token_key)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KeyRing:
        return cls([SigningKey.from_json(item) for item in data["signing_keys"]], _unb64url(data["token_key"]))
