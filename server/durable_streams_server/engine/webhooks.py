"""Webhook transport: the SSRF check with DNS, and one signed POST per delivery attempt.

Runs on the server's event loop: name resolution through ``loop.getaddrinfo`` and the
request through an ``httpx.AsyncClient`` (no proxies from the environment, no redirects
followed: a redirect could lead anywhere, so it counts as a failed attempt). Every
attempt re-checks the target's addresses (``protocol.webhook_rules``), so a name that
now resolves to a refused address fails the attempt instead of reaching it. What is
left is the window between that lookup and httpx's own (DNS rebinding within
milliseconds); an operator who needs it closed can put an egress proxy in front.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from ..protocol.errors import BadRequest
from ..protocol.webhook_rules import IPAddress, IPNetwork, check_addresses, host_literal, split_webhook_url

log = logging.getLogger("durable_streams_server.webhooks")


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    ok: bool
    done: bool = False
    error: str | None = None


class WebhookSender:
    def __init__(self, allowed: Sequence[IPNetwork], timeout_s: float = 10.0) -> None:
        self.allowed = tuple(allowed)
        self.timeout_s = timeout_s
        self._client: httpx.AsyncClient | None = None

    async def _resolve(self, host: str, port: int) -> list[IPAddress]:
        literal = host_literal(host)
        if literal is not None:
            return [literal]
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return [ipaddress.ip_address(info[4][0]) for info in infos]

    async def check_url(self, url: str) -> None:
        """At creation: refuse what is refused now; a name that does not resolve yet is let
        through (every delivery checks again)."""
        parts, host = split_webhook_url(url)
        try:
            addresses = await self._resolve(host, parts.port or 443)
        except OSError:
            if host_literal(host) is None and parts.scheme == "https":
                return
            raise BadRequest(f"cannot resolve webhook host {host!r}", code="WEBHOOK_URL_REJECTED") from None
        check_addresses(addresses, parts.scheme, self.allowed)

    async def deliver(self, url: str, body: bytes, signature: str) -> DeliveryResult:
        try:
            parts, host = split_webhook_url(url)
            check_addresses(await self._resolve(host, parts.port or 443), parts.scheme, self.allowed)
        except BadRequest as refused:
            return DeliveryResult(False, error=refused.message)
        except OSError as exc:
            return DeliveryResult(False, error=f"cannot resolve {host!r}: {exc}")
        if self._client is None:
            self._client = httpx.AsyncClient(trust_env=False, follow_redirects=False, timeout=self.timeout_s)
        try:
            response = await self._client.post(
                url,
                content=body,
                headers={"Content-Type": "application/json", "Webhook-Signature": signature},
            )
        except httpx.HTTPError as exc:
            return DeliveryResult(False, error=f"{type(exc).__name__}: {exc}")
        if not 200 <= response.status_code < 300:
            return DeliveryResult(False, error=f"the receiver answered {response.status_code}")
        try:
            answer = json.loads(response.content) if response.content else {}
        except ValueError:
            answer = {}
        return DeliveryResult(True, done=isinstance(answer, dict) and answer.get("done") is True)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
