"""Webhook rules: which URLs may receive deliveries (SSRF, §6.2 / §12.8), retry backoff.

A webhook URL must be ``https://`` and its host must be a public address. Addresses
that are not globally routable — loopback, RFC 1918 private, link-local (cloud metadata
``169.254.169.254`` included), carrier-grade NAT, unique-local IPv6, multicast,
unspecified, reserved, documentation ranges — are refused, unless the operator lists
their network in ``--allow-private-webhook-urls`` (CIDRs, e.g. ``127.0.0.0/8`` for local
development). Plain ``http://`` is allowed only to such an operator-allowed address
(the protocol's development exception): a public target must use TLS.

A host name is checked against every address it resolves to (any refused address
refuses the URL), at creation where it resolves and again before every delivery, so a
name that later points inside the network is refused then. ``localhost`` and
``*.localhost`` count as loopback without a lookup.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Iterable, Sequence
from urllib.parse import SplitResult, urlsplit

from .errors import BadRequest

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_URL_CHARS = 2048


def rejected(message: str) -> BadRequest:
    return BadRequest(message, code="WEBHOOK_URL_REJECTED")


def parse_networks(values: Iterable[str]) -> tuple[IPNetwork, ...]:
    """The operator's allowed private networks; ``ValueError`` names a bad entry."""
    networks = []
    for value in values:
        for item in value.split(","):
            if item.strip():
                try:
                    networks.append(ipaddress.ip_network(item.strip(), strict=False))
                except ValueError:
                    raise ValueError(f"not a network (CIDR) or address: {item.strip()!r}") from None
    return tuple(networks)


def split_webhook_url(url: str) -> tuple[SplitResult, str]:
    """``(parts, host)`` of a syntactically acceptable http(s) URL; 400 otherwise."""
    if len(url) > MAX_URL_CHARS:
        raise rejected(f"the webhook URL is longer than {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise rejected("the webhook URL is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise rejected("the webhook URL must be an absolute https:// URL")
    if parts.username is not None or parts.password is not None:
        raise rejected("the webhook URL must not carry credentials")
    return parts, parts.hostname.lower().rstrip(".")


def host_literal(host: str) -> IPAddress | None:
    """The address a host names without DNS: an IP literal, or loopback for ``localhost``."""
    if host == "localhost" or host.endswith(".localhost"):
        return ipaddress.ip_address("127.0.0.1")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def check_address(address: IPAddress, scheme: str, allowed: Sequence[IPNetwork]) -> None:
    """Refuse a target address per the rules above (raises 400 ``WEBHOOK_URL_REJECTED``)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    operator_allowed = any(address.version == network.version and address in network for network in allowed)
    if operator_allowed:
        return
    if not address.is_global or address.is_multicast:
        raise rejected(
            f"webhook target {address} is a private, loopback, link-local or reserved address; "
            "the operator can allow such networks with --allow-private-webhook-urls"
        )
    if scheme != "https":
        raise rejected("webhook URLs must use https:// (http:// only for operator-allowed local networks)")


def check_addresses(addresses: Iterable[IPAddress], scheme: str, allowed: Sequence[IPNetwork]) -> None:
    for address in addresses:
        check_address(address, scheme, allowed)


def retry_delay_s(attempt: int, initial_s: float, max_s: float, jitter: float = 0.2) -> float:
    """Delay before retry number ``attempt`` (1, 2, …): ``initial * 2^(attempt-1)`` capped at
    ``max``, then ±``jitter`` (20 %) so that many failing subscriptions do not retry in step."""
    base: float = min(max_s, initial_s * 2.0 ** min(attempt - 1, 62))
    return base * (1 + random.uniform(-jitter, jitter))
