"""Bearer-token authentication and authorization, checked before routing.

Off unless tokens are configured (``--auth-tokens-file`` or ``DURABLE_STREAMS_AUTH_TOKENS``,
parsed by ``protocol/tokens.py``); then every request except CORS preflights and the health
probes needs ``Authorization: Bearer <token>``. Per request ``authorize`` asks the
permission policy (``policy.py``) what the request needs, reads the token from the one
Authorization header (401 if it is missing, malformed or unknown), and lets the request
through only if the token's grant meets every need (else 403 naming the token and what
it lacks). Tokens never reach logs or error messages; the token's ``name`` is left in the
ASGI scope under ``PRINCIPAL_KEY`` for per-token rate limits.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from ..protocol.errors import Forbidden, ProtocolError, Unauthorized
from ..protocol.tokens import AuthConfig, TokenGrant
from .limits import PRINCIPAL_KEY
from .policy import Need, request_needs, unmet
from .request_fields import header
from .responses import error_response
from .routes import route_path

_CHALLENGE = 'Bearer realm="durable-streams"'


def authenticate(config: AuthConfig, headers: Sequence[tuple[bytes, bytes]]) -> TokenGrant:
    """The grant of the request's bearer token; raises ``Unauthorized`` without a valid one."""
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
    return grant


def check(config: AuthConfig, method: str, headers: Sequence[tuple[bytes, bytes]], needs: Sequence[Need]) -> TokenGrant:
    """The grant that permits this request; raises ``Unauthorized`` / ``Forbidden`` otherwise."""
    grant = authenticate(config, headers)
    refusal = unmet(grant, method, needs)
    if refusal is not None:
        need, problem = refusal
        raise Forbidden(
            f"token {grant.name!r} {problem}",
            headers={"WWW-Authenticate": f'{_CHALLENGE}, error="insufficient_scope", scope="{need.scope}"'},
        )
    return grant


def authorize(config: AuthConfig, scope: Scope) -> ProtocolError | None:
    """``None`` if the request may go on (its token's name left under ``PRINCIPAL_KEY``),
    else the 401/403 to answer. CORS preflights carry no token and always go on."""
    method = scope["method"]
    if method == "OPTIONS":
        return None
    fork_from = header(scope, b"stream-forked-from")
    try:
        needs = request_needs(method, route_path(scope), fork_from)
        if needs:
            scope[PRINCIPAL_KEY] = check(config, method, scope["headers"], needs).name
    except ProtocolError as error:
        return error
    return None


class AuthMiddleware:
    """``authorize`` as ASGI middleware, for an embedder who composes the pieces itself
    (the server's own request policy calls ``authorize`` directly: ``request_policy.py``)."""

    def __init__(self, app: ASGIApp, config: AuthConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = authorize(self.config, scope)
            if refusal is not None:
                await error_response(refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)
