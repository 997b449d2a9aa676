"""Pure subscription rules: globs, ids, request bodies, SSRF address classes, backoff, tokens."""

from __future__ import annotations

import ipaddress

import pytest

from durable_streams_server.protocol import wake_tokens
from durable_streams_server.protocol.errors import BadRequest, Unauthorized
from durable_streams_server.protocol.subscriptions import (
    glob_match,
    is_reserved,
    literal_prefix,
    parse_config,
    parse_wake_report,
    validate_pattern,
    validate_subscription_id,
)
from durable_streams_server.protocol.webhook_rules import (
    check_address,
    host_literal,
    parse_networks,
    retry_delay_s,
    split_webhook_url,
)


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("events/*", "events/a", True),
        ("events/*", "events/a/b", False),
        ("events/*", "events", False),
        ("events/**", "events", True),
        ("events/**", "events/a/b/c", True),
        ("**/x", "x", True),
        ("**/x", "a/b/x", True),
        ("**/x", "a/b/y", False),
        ("a/*/c", "a/b/c", True),
        ("a/*/c", "a/c", False),
        ("a/**/c", "a/c", True),
        ("exact", "exact", True),
        ("exact", "exactly", False),
    ],
)
def test_glob_match(pattern: str, path: str, expected: bool) -> None:
    assert glob_match(pattern, path) is expected


def test_patterns_with_partial_wildcards_or_empty_segments_are_refused() -> None:
    for bad in ("events-*", "a//b", "../x", "", "a/**x"):
        with pytest.raises(BadRequest) as caught:
            validate_pattern(bad)
        assert caught.value.code == "INVALID_PATTERN"


def test_literal_prefix() -> None:
    assert literal_prefix("events/*") == "events/"
    assert literal_prefix("**") == ""
    assert literal_prefix("a/b") == "a/b"


def test_reserved_namespace() -> None:
    assert is_reserved("__ds") and is_reserved("__ds/subscriptions/x")
    assert not is_reserved("__dsx") and not is_reserved("events/__ds")


def test_subscription_ids() -> None:
    assert validate_subscription_id("sub-1778324210000") == "sub-1778324210000"
    for bad in ("", "-x", "a/b", "x" * 201, "a b"):
        with pytest.raises(BadRequest):
            validate_subscription_id(bad)


def test_config_is_normalized_so_equal_configurations_hash_equal() -> None:
    one = parse_config({"type": "webhook", "streams": ["b", "a", "a"], "webhook": {"url": "https://x.test/h"}}, False)
    two = parse_config(
        {"type": "webhook", "streams": ["a", "b"], "webhook": {"url": "https://x.test/h"}, "lease_ttl_ms": 30000},
        False,
    )
    assert one.streams == ("a", "b")
    assert one.config_hash == two.config_hash
    other = parse_config({"type": "webhook", "streams": ["a"], "webhook": {"url": "https://x.test/h"}}, False)
    assert other.config_hash != one.config_hash


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"type": "webhook", "webhook": {"url": "https://x.test"}}, "pattern or streams"),
        ({"type": "nope", "pattern": "a"}, "type must be"),
        ({"type": "webhook", "pattern": "a"}, "needs webhook"),
        ({"type": "pull-wake", "pattern": "a"}, "wake_stream"),
        ({"type": "pull-wake", "pattern": "a", "wake_stream": "w", "lease_ttl_ms": 999}, "lease_ttl_ms"),
        ({"type": "pull-wake", "pattern": "a", "wake_stream": "w", "lease_ttl_ms": 600_001}, "lease_ttl_ms"),
        ({"type": "pull-wake", "pattern": "a", "wake_stream": "w", "extra": 1}, "unknown field"),
        ({"type": "pull-wake", "streams": ["__ds/x"], "wake_stream": "w"}, "reserved"),
        ({"type": "pull-wake", "streams": ["a/b"], "wake_stream": "w"}, "no '/'"),
    ],
)
def test_bad_configurations_are_400_naming_the_problem(body: dict[str, object], fragment: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_config(body, bucketed=body.get("streams") == ["a/b"])
    assert fragment in caught.value.message


def test_wake_report_parses_acks_at_message_boundaries_only() -> None:
    offset = "0000000000000002_0000000000000000"
    report = parse_wake_report(
        {"wake_id": "w1", "generation": 3, "acks": [{"stream": "a", "offset": offset}], "done": True}, False
    )
    assert (report.wake_id, report.generation, report.acks, report.done) == ("w1", 3, (("a", 2),), True)
    with pytest.raises(BadRequest) as caught:
        parse_wake_report(
            {
                "wake_id": "w1",
                "generation": 3,
                "acks": [{"stream": "a", "offset": "0000000000000002_0000000000000005"}],
            },
            False,
        )
    assert caught.value.code == "INVALID_OFFSET"


# -- SSRF (§12.8) ---------------------------------------------------------------------

REFUSED_BY_DEFAULT = [
    "127.0.0.1",  # loopback
    "::1",
    "10.0.0.1",  # RFC 1918
    "172.16.5.4",
    "192.168.1.1",
    "169.254.169.254",  # link-local: cloud metadata
    "fe80::1",
    "fd00::1",  # unique local
    "100.64.0.1",  # carrier-grade NAT
    "0.0.0.0",
    "224.0.0.1",  # multicast
    "::ffff:10.0.0.1",  # IPv4-mapped private
]


@pytest.mark.parametrize("address", REFUSED_BY_DEFAULT)
def test_non_public_addresses_are_refused(address: str) -> None:
    with pytest.raises(BadRequest) as caught:
        check_address(ipaddress.ip_address(address), "https", ())
    assert caught.value.code == "WEBHOOK_URL_REJECTED"


def test_public_https_is_allowed_and_public_http_is_not() -> None:
    check_address(ipaddress.ip_address("93.184.216.34"), "https", ())
    with pytest.raises(BadRequest, match="https://"):
        check_address(ipaddress.ip_address("93.184.216.34"), "http", ())


def test_operator_networks_allow_exactly_those_addresses_over_http() -> None:
    allowed = parse_networks(["127.0.0.0/8"])
    check_address(ipaddress.ip_address("127.0.0.5"), "http", allowed)
    with pytest.raises(BadRequest):
        check_address(ipaddress.ip_address("10.0.0.1"), "http", allowed)
    with pytest.raises(ValueError, match="not-a-net"):
        parse_networks(["127.0.0.0/8,not-a-net"])


def test_url_shapes() -> None:
    assert host_literal(split_webhook_url("http://LOCALHOST:8080/x")[1]) == ipaddress.ip_address("127.0.0.1")
    assert host_literal("app.localhost") == ipaddress.ip_address("127.0.0.1")
    assert host_literal("example.com") is None
    for bad in ("ftp://x.test/", "https://user:pw@x.test/", "/relative", "https://x.test:99999/"):
        with pytest.raises(BadRequest):
            split_webhook_url(bad)


def test_retry_delays_double_from_initial_to_max_with_20_percent_jitter() -> None:
    for attempt, base in [(1, 1.0), (2, 2.0), (3, 4.0), (6, 32.0), (7, 60.0), (50, 60.0)]:
        delays = [retry_delay_s(attempt, 1.0, 60.0) for _ in range(50)]
        assert all(base * 0.8 <= delay <= base * 1.2 for delay in delays), (attempt, min(delays), max(delays))


# -- tokens (§12.9) -------------------------------------------------------------------


def test_tokens_round_trip_and_refuse_tampering() -> None:
    key = b"k" * 32
    claim = wake_tokens.WakeClaim("v1/stream/sub", 7, "w_abc", "callback")
    token = wake_tokens.issue(key, claim)
    assert wake_tokens.verify(key, token) == claim
    payload = token.split(".")[1]
    forged = token.replace(payload, payload[:-2] + ("AA" if payload[-2:] != "AA" else "BB"))
    for bad in (forged, token + "x", "v2" + token[2:], "garbage"):
        with pytest.raises(Unauthorized):
            wake_tokens.verify(key, bad)
    with pytest.raises(Unauthorized):
        wake_tokens.verify(b"other" * 8, token)
