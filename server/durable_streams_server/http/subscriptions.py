"""The reserved ``__ds`` control namespace (§6, §7) on both surfaces.

The router sends every path whose first root-relative segment is ``__ds`` here before
any stream operation: ``/v1/stream/__ds/...`` (root ``v1/stream/``) and
``/{bucket_id}/__ds/...`` (root ``{bucket_id}/``: a bucket's subscriptions cover that
bucket's streams and their paths are stream ids). Nothing here ever creates, reads or
deletes a stream; unknown control paths answer 404, known ones with another method 405.

    GET    __ds/jwks.json                              webhook signing keys (JWKS)
    PUT    __ds/subscriptions/{id}                     create (201) / re-confirm (200) / 409
    GET    __ds/subscriptions/{id}                     read
    DELETE __ds/subscriptions/{id}                     delete (204)
    POST   __ds/subscriptions/{id}/streams             add explicit links (204)
    DELETE __ds/subscriptions/{id}/streams/{path}      remove an explicit link (204)
    ...    __ds/consumers/..., __ds/tombstones/...      named consumers, tombstones (``consumers``)
    POST   __ds/subscriptions/{id}/callback            webhook callback (callback token)
    POST   __ds/subscriptions/{id}/claim               pull-wake claim (200, or 204: nothing pending)
    POST   __ds/subscriptions/{id}/ack                 pull-wake ack / heartbeat (claim token)
    POST   __ds/subscriptions/{id}/release             pull-wake release (claim token, 204)

``{path}`` is URL-encoded and may contain '/' (encoded or not: both decode the same).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..engine.subscription_state import Subscription
from ..engine.subscriptions import SubscriptionManager
from ..protocol.errors import BadRequest, MethodNotAllowed, NotFound, PayloadTooLarge
from ..protocol.subscriptions import (
    RESERVED_SEGMENT,
    AlreadyClaimed,
    parse_claim_body,
    parse_config,
    parse_membership_body,
    parse_wake_report,
    validate_path,
    validate_subscription_id,
)
from ..protocol.wake_tokens import bearer
from .consumers import RESOURCES, ConsumerHandlers

MAX_CONTROL_BODY_BYTES = 1024 * 1024
WORKER_ACTIONS = ("callback", "claim", "ack", "release")
NO_STORE = {"Cache-Control": "no-store"}


def control_path(root_relative: str) -> list[str] | None:
    """The segments after ``__ds`` if ``root_relative`` is in the control namespace."""
    segments = root_relative.split("/")
    return segments[1:] if segments[0] == RESERVED_SEGMENT else None


class SubscriptionHandlers:
    def __init__(self, manager: SubscriptionManager) -> None:
        self.manager = manager
        self.consumers = ConsumerHandlers(manager.engine)
        """Named consumers and tombstones, the namespace's other residents (``consumers``)."""

    async def handle(self, request: Request, root: str, rest: list[str], bucketed: bool) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        try:
            return await self._route(request, method, root, rest, bucketed)
        except AlreadyClaimed as claimed:
            body = {"error": {"code": claimed.code, "message": claimed.message, **claimed.details}}
            return JSONResponse(body, status_code=claimed.status, headers=NO_STORE)

    async def _route(self, request: Request, method: str, root: str, rest: list[str], bucketed: bool) -> Response:
        if rest and rest[0] in RESOURCES:
            return await self.consumers.handle(request, method, root, rest, bucketed, _json_body)
        if rest == ["jwks.json"]:
            _allow(method, "GET")
            await self.manager.store.keys_durable()  # (generated at the first start)
            return Response(
                json.dumps(self.manager.keys.jwks()),
                media_type="application/jwk-set+json",
                headers={"Cache-Control": "public, max-age=300"},
            )
        if len(rest) < 2 or rest[0] != "subscriptions":
            raise NotFound(f"no control resource {request.url.path!r}", code="NOT_FOUND")
        subscription_id = validate_subscription_id(rest[1])
        manager = self.manager
        if len(rest) == 2:
            if method == "PUT":
                return await self._put(request, root, subscription_id, bucketed)
            if method == "GET":
                return self._json(request, manager.get(root, subscription_id), 200)
            if method == "DELETE":
                await manager.delete(root, subscription_id)
                return Response(status_code=204)
            raise MethodNotAllowed(f"{request.method} is not supported on a subscription")
        action = rest[2]
        if action == "streams" and len(rest) == 3:
            _allow(method, "POST")
            paths = parse_membership_body(await _json_body(request), bucketed)
            await manager.add_streams(root, subscription_id, paths)
            return Response(status_code=204)
        if action == "streams":
            _allow(method, "DELETE")
            path = validate_path("/".join(rest[3:]), bucketed, "path")
            await manager.remove_stream(root, subscription_id, path)
            return Response(status_code=204)
        if action not in WORKER_ACTIONS or len(rest) != 3:
            raise NotFound(f"no control resource {request.url.path!r}", code="NOT_FOUND")
        _allow(method, "POST")
        body = await _json_body(request)
        if action == "claim":
            claimed = await manager.claim(root, subscription_id, parse_claim_body(body))
            return Response(status_code=204) if claimed is None else JSONResponse(claimed, headers=NO_STORE)
        token = bearer(request.headers.get("authorization"))
        report = parse_wake_report(body, bucketed, allow_acks=action != "release")
        kind = "release" if action == "release" else "report"
        answer = await manager.report(root, subscription_id, token, report, kind)
        return Response(status_code=204) if answer is None else JSONResponse(answer, headers=NO_STORE)

    async def _put(self, request: Request, root: str, subscription_id: str, bucketed: bool) -> Response:
        config = parse_config(await _json_body(request), bucketed)
        if config.wake_stream is not None and config.wake_stream in config.streams:
            raise BadRequest("the wake stream cannot also be a subscribed stream", code="INVALID_SUBSCRIPTION")
        if config.webhook_url is not None:
            await self.manager.deliveries.sender.check_url(config.webhook_url)
        created, sub = await self.manager.put(root, subscription_id, config, root_url(request))
        return self._json(request, sub, 201 if created else 200)

    def _json(self, request: Request, sub: Subscription, status: int) -> Response:
        return JSONResponse(self.describe(sub, root_url(request)), status_code=status, headers=NO_STORE)

    def describe(self, sub: Subscription, base: str) -> dict[str, Any]:
        config = sub.config
        webhook = None
        if config.webhook_url is not None:
            webhook = {
                "url": config.webhook_url,
                "signing": {"alg": "ed25519", "kid": self.manager.keys.active.kid, "jwks_url": f"{base}__ds/jwks.json"},
            }
        created = datetime.fromtimestamp(sub.created_ms / 1000, UTC).isoformat(timespec="milliseconds")
        failing = sub.wake is not None and sub.wake.next_attempt_ms is not None
        return {
            "id": sub.subscription_id,
            "subscription_id": sub.subscription_id,
            "type": config.type,
            "pattern": config.pattern,
            "streams": sub.stream_views(self.manager.tails(sub)),
            "webhook": webhook,
            "wake_stream": config.wake_stream,
            "lease_ttl_ms": config.lease_ttl_ms,
            "created_at": created.replace("+00:00", "Z"),
            "status": "failed" if failing else "active",
            "description": config.description,
            "generation": sub.generation,
        }


def root_url(request: Request) -> str:
    """The public URL of the stream root this request addressed (ends with '/')."""
    url = str(request.url.replace(query=None, fragment=None))
    return url[: url.index("/" + RESERVED_SEGMENT) + 1]


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise MethodNotAllowed(f"{method} is not supported here; use {allowed}")


async def _json_body(request: Request) -> object:
    body = await request.body()
    if len(body) > MAX_CONTROL_BODY_BYTES:
        raise PayloadTooLarge(f"control request bodies are at most {MAX_CONTROL_BODY_BYTES} bytes")
    try:
        return json.loads(body)
    except ValueError:
        raise BadRequest("the body must be JSON", code="INVALID_JSON") from None
