"""Bearer tokens: who may read, write or administer which streams and buckets.

Off unless tokens are configured (``--auth-tokens-file`` or ``DURABLE_STREAMS_AUTH_TOKENS``);
then every request except CORS preflights and the health probes needs
``Authorization: Bearer <token>``. Each token has a scope (read < write < admin) and
optionally the buckets and stream-key prefixes it is limited to. Only SHA-256 digests of
tokens are kept, and a presented token is compared against every configured digest with
``hmac.compare_digest``, so neither timing nor a memory dump gives a token away; tokens
never reach logs, reprs or error messages (those name a token by its ``name``).

Streams are identified by their key, as the router resolves it: ``v1/stream/<path>`` on
the base surface, ``<bucket_id>/<stream_id>`` on the bucketed one. A grant covers a stream
if the key starts with one of its ``prefixes`` or lies in one of its ``buckets``; bucket
operations and listings need the bucket itself; ``/metrics`` needs an unlimited admin token.
The reserved ``__ds`` namespace of a root (subscriptions) needs that whole root: see
``_control_needs``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from starlette.types import ASGIApp, Receive, Scope, Send

from ..engine.buckets import BASE_SURFACE_PREFIX, bucket_of
from ..protocol.errors import BadRequest, Forbidden, ProtocolError, Unauthorized
from ..protocol.ids import validate_bucket_id
from ..protocol.subscriptions import RESERVED_SEGMENT
from .responses import error_response
from .streams import stream_name_from_reference
from .targets import base_target

AccessScope = Literal["read", "write", "admin"]
SCOPES: tuple[AccessScope, ...] = get_args(AccessScope)
"""In increasing order: each scope includes the ones before it."""

TOKENS_ENV = "DURABLE_STREAMS_AUTH_TOKENS"
PRINCIPAL_KEY = "durable_streams.principal"
"""ASGI scope key holding the authenticated token's ``name`` (per-token rate limits key on it)."""
MIN_TOKEN_CHARS = 16
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
METRICS_PATH = "/metrics"
WAKE_TOKEN_ACTIONS = ("callback", "ack", "release")

_B64TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")  # RFC 6750's token68: what fits in the header
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
_FIELDS = frozenset({"name", "token", "token_sha256", "scope", "buckets", "prefixes"})
_CHALLENGE = 'Bearer realm="durable-streams"'


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

    def covers_stream(self, key: str) -> bool:
        if self.unlimited or key.startswith(self.prefixes):
            return True
        located = bucket_of(key)
        return located is not None and located[0] in self.buckets

    def covers_bucket(self, bucket_id: str) -> bool:
        return self.unlimited or bucket_id in self.buckets


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


@dataclass(frozen=True)
class Need:
    """One permission a request needs: a scope on a stream, a bucket, or the whole server.

    ``kind="any"`` (paths no route serves) is met by every valid token, so those still
    need one but get their 404 from the router.
    """

    scope: AccessScope
    kind: Literal["stream", "bucket", "server", "any"]
    target: str = ""

    def covered_by(self, grant: TokenGrant) -> bool:
        if self.kind == "stream":
            return grant.covers_stream(self.target)
        if self.kind == "bucket":
            return grant.covers_bucket(self.target)
        return grant.unlimited or self.kind == "any"

    def describe(self) -> str:
        """Names what a grant lacks ("any" never needs naming: every grant covers it)."""
        return f"{self.kind} {self.target!r}" if self.kind in ("stream", "bucket") else "the whole server"


# -- configuration -----------------------------------------------------------------------


def load_auth_config(path: Path | None, env_text: str | None) -> AuthConfig | None:
    """Tokens from the file or from ``DURABLE_STREAMS_AUTH_TOKENS``; ``None`` when neither is set."""
    if path is not None and env_text is not None:
        raise AuthConfigError(f"tokens are configured twice: use --auth-tokens-file or {TOKENS_ENV}, not both")
    if path is not None:
        try:
            return parse_tokens(path.read_text(encoding="utf-8"), f"--auth-tokens-file {path}")
        except (OSError, UnicodeDecodeError) as exc:
            raise AuthConfigError(f"cannot read --auth-tokens-file {path}: {exc}") from None
    return parse_tokens(env_text, TOKENS_ENV) if env_text is not None else None


def parse_tokens(text: str, source: str) -> AuthConfig:
    """A JSON list of ``{"name", "token" | "token_sha256", "scope", "buckets"?, "prefixes"?}``."""
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


# -- requests ----------------------------------------------------------------------------


def request_needs(method: str, path: str, fork_from: str | None) -> tuple[Need, ...]:
    """What a request to ``path`` (as the router sees it) needs; nothing for the health probes.

    GET/HEAD read; PUT/POST/DELETE on streams and snapshots write; changing a bucket is
    admin; creating a fork also reads its source.
    """
    reading = method in ("GET", "HEAD")
    segments = path[1:].split("/")
    if path.startswith("/" + BASE_SURFACE_PREFIX):
        if segments[2:3] == [RESERVED_SEGMENT]:
            return _control_needs(method, segments[3:], Need("read", "stream", BASE_SURFACE_PREFIX))
        stream, _, _ = base_target(path[1:])
        return _stream_needs(method, stream, fork_from)
    if segments[1:2] == [RESERVED_SEGMENT]:
        return _control_needs(method, segments[2:], Need("read", "bucket", segments[0]))
    if len(segments) == 1:
        if reading and path in OPEN_PATHS:
            return ()
        if reading and path == METRICS_PATH:
            return (Need("admin", "server"),)
        return (Need("read" if reading else "admin", "bucket", segments[0]),)
    if len(segments) == 2 and segments[1] == "streams":
        return (Need("read" if reading else "write", "bucket", segments[0]),)
    if len(segments) <= 4:
        return _stream_needs(method, f"{segments[0]}/{segments[1]}", fork_from)
    return (Need("read", "any"),)


def _control_needs(method: str, rest: list[str], root: Need) -> tuple[Need, ...]:
    """The ``__ds`` namespace. A subscription can cover any stream of its root (a pattern is
    only known from the body), so managing or claiming one needs write on the whole root
    (the base surface, or the bucket); reading one needs read on it. The JWKS is public,
    and callback/ack/release carry their own wake token instead of a service token."""
    if rest == ["jwks.json"] or (len(rest) == 3 and rest[0] == "subscriptions" and rest[2] in WAKE_TOKEN_ACTIONS):
        return ()
    if method in ("GET", "HEAD"):
        return (root,)
    return (Need("write", root.kind, root.target),)


def _stream_needs(method: str, key: str, fork_from: str | None) -> tuple[Need, ...]:
    need = Need("read" if method in ("GET", "HEAD") else "write", "stream", key)
    if method == "PUT" and fork_from is not None:
        return need, Need("read", "stream", stream_name_from_reference(fork_from))
    return (need,)


def route_path(scope: Scope) -> str:
    """The path the router matches: ``scope["path"]`` without the ``root_path`` of a mount."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and (path == root or path[len(root)] == "/"):
        return path[len(root) :]
    return path


def check(config: AuthConfig, method: str, headers: Sequence[tuple[bytes, bytes]], needs: Sequence[Need]) -> TokenGrant:
    """The grant that permits this request; raises ``Unauthorized`` / ``Forbidden`` otherwise."""
    values = [value for name, value in headers if name == b"authorization"]
    if not values:
        raise Unauthorized(
            "this server requires a bearer token: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": _CHALLENGE},
        )
    scheme, _, token = values[0].strip().partition(b" ")
    token = token.strip()
    if len(values) > 1 or scheme.lower() != b"bearer" or not token:
        raise Unauthorized(
            "the Authorization header must be a single 'Bearer <token>'",
            headers={"WWW-Authenticate": f'{_CHALLENGE}, error="invalid_request"'},
        )
    grant = config.authenticate(token)
    if grant is None:
        raise Unauthorized(
            "the bearer token is not valid", headers={"WWW-Authenticate": f'{_CHALLENGE}, error="invalid_token"'}
        )
    for need in needs:
        if not grant.includes(need.scope):
            problem = f"has scope {grant.scope!r}; {method} on {need.describe()} needs {need.scope!r}"
        elif not need.covered_by(grant):
            problem = f"does not cover {need.describe()}"
        else:
            continue
        raise Forbidden(
            f"token {grant.name!r} {problem}",
            headers={"WWW-Authenticate": f'{_CHALLENGE}, error="insufficient_scope", scope="{need.scope}"'},
        )
    return grant


class AuthMiddleware:
    """Answers 401/403 before the request reaches a route; installed only when auth is on."""

    def __init__(self, app: ASGIApp, config: AuthConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] != "OPTIONS":  # CORS preflights carry no token
            method, headers = scope["method"], scope["headers"]
            fork_from = next((v.decode("latin-1") for k, v in headers if k == b"stream-forked-from"), None)
            try:
                needs = request_needs(method, route_path(scope), fork_from)
                if needs:
                    scope[PRINCIPAL_KEY] = check(self.config, method, headers, needs).name
            except ProtocolError as error:
                await error_response(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)
