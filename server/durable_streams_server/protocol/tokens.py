"""Bearer tokens: the token list's format, its validation, and looking a token up.

The operator configures a JSON list of ``{"name", "token" | "token_sha256", "scope",
"buckets"?, "prefixes"?}`` objects (``parse_tokens``). Each token has a scope (read < write
< admin) and optionally the buckets and stream-key prefixes it is limited to; what those
permit is the permission policy's business (``http/policy.py``), not this module's.

Only SHA-256 digests of tokens are kept, and a presented token is compared against every
configured digest with ``hmac.compare_digest``, so neither timing nor a memory dump gives a
token away; tokens never reach reprs or error messages (those name a token by its ``name``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from .errors import BadRequest
from .ids import validate_bucket_id

AccessScope = Literal["read", "write", "admin"]
SCOPES: tuple[AccessScope, ...] = get_args(AccessScope)
"""In increasing order: each scope includes the ones before it."""

MIN_TOKEN_CHARS = 16

_B64TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")  # RFC 6750's token68: what fits in the header
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
_FIELDS = frozenset({"name", "token", "token_sha256", "scope", "buckets", "prefixes"})


class AuthConfigError(ValueError):
    """The token configuration is unusable; the message names the source and the field."""


@dataclass(frozen=True)
class TokenGrant:
    """What one token may do. With neither ``buckets`` nor ``prefixes`` it covers everything."""

    name: str
    scope: AccessScope
    buckets: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()
    digest: bytes = field(default=b"", repr=False)
    """SHA-256 of the token; the token itself is never kept."""

    @property
    def unlimited(self) -> bool:
        return not self.buckets and not self.prefixes

    def includes(self, scope: AccessScope) -> bool:
        return SCOPES.index(self.scope) >= SCOPES.index(scope)


@dataclass(frozen=True)
class AuthConfig:
    """The configured grants (names unique, tokens distinct), as ``parse_tokens`` checks them."""

    grants: tuple[TokenGrant, ...]

    def authenticate(self, token: bytes) -> TokenGrant | None:
        """The grant of ``token``; every digest is compared (no early exit), in constant time."""
        digest = hashlib.sha256(token).digest()
        found = None
        for grant in self.grants:
            if hmac.compare_digest(digest, grant.digest):
                found = grant
        return found


def parse_tokens(text: str, source: str) -> AuthConfig:
    """A JSON list of ``{"name", "token" | "token_sha256", "scope", "buckets"?, "prefixes"?}``.

    ``source`` (e.g. the file's name) starts every error message.
    """
    try:
        entries = json.loads(text)
    except ValueError as exc:  # the message gives a position, never the text itself
        raise AuthConfigError(f"{source}: not valid JSON ({exc})") from None
    if not isinstance(entries, list) or not entries:
        raise AuthConfigError(f"{source}: expected a non-empty JSON list of token objects")
    grants: list[TokenGrant] = []
    for number, entry in enumerate(entries, start=1):
        grant = _grant(entry, f"{source}: token #{number}")
        for other in grants:
            if other.name == grant.name:
                raise AuthConfigError(f"{source}: two tokens are named {grant.name!r}")
            if other.digest == grant.digest:
                raise AuthConfigError(f"{source}: tokens {other.name!r} and {grant.name!r} are the same token")
        grants.append(grant)
    return AuthConfig(tuple(grants))


def _grant(entry: object, where: str) -> TokenGrant:
    if not isinstance(entry, dict):
        raise AuthConfigError(f"{where}: expected a JSON object")
    unknown = sorted(set(entry) - _FIELDS)
    if unknown:
        raise AuthConfigError(f"{where}: unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(_FIELDS))})")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise AuthConfigError(f"{where}: field 'name' must be a non-empty string")
    where = f"{where} ({name!r})"
    scope = entry.get("scope")
    if scope not in SCOPES:
        raise AuthConfigError(f"{where}: field 'scope' must be one of {', '.join(SCOPES)}")
    buckets = _strings(entry, "buckets", where)
    for bucket_id in buckets:
        try:
            validate_bucket_id(bucket_id)
        except BadRequest as exc:
            raise AuthConfigError(f"{where}: field 'buckets': {exc.message}") from None
    prefixes = tuple(prefix.lstrip("/") for prefix in _strings(entry, "prefixes", where))
    if not all(prefixes):
        raise AuthConfigError(f"{where}: field 'prefixes' must not hold empty prefixes (omit it to cover everything)")
    return TokenGrant(name, scope, frozenset(buckets), prefixes, _digest(entry, where))


def _digest(entry: dict[str, object], where: str) -> bytes:
    token, hashed = entry.get("token"), entry.get("token_sha256")
    if (token is None) == (hashed is None):
        raise AuthConfigError(f"{where}: give exactly one of the fields 'token' and 'token_sha256'")
    if hashed is not None:
        if not isinstance(hashed, str) or not _SHA256_HEX.fullmatch(hashed):
            raise AuthConfigError(f"{where}: field 'token_sha256' must be 64 hex digits (sha256sum of the token)")
        return bytes.fromhex(hashed)
    if not isinstance(token, str) or not _B64TOKEN.fullmatch(token):
        raise AuthConfigError(f"{where}: field 'token' must be a string of A-Z a-z 0-9 - . _ ~ + / (then '=')")
    if len(token) < MIN_TOKEN_CHARS:
        raise AuthConfigError(
            f"{where}: field 'token' is shorter than {MIN_TOKEN_CHARS} characters; "
            "generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return hashlib.sha256(token.encode("ascii")).digest()


def _strings(entry: dict[str, object], key: str, where: str) -> Sequence[str]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise AuthConfigError(f"{where}: field {key!r} must be a list of strings")
    return value
