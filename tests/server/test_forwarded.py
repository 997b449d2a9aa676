"""Requests from behind a proxy take the fast path, with uvicorn's reading of their forwarding headers.

A load balancer adds ``X-Forwarded-For`` / ``X-Forwarded-Proto`` to every request. From a
trusted proxy (``--forwarded-allow-ips``; here the test client's 127.0.0.1) the client a rate
limit charges is the forwarded one and a created stream's ``Location`` has the forwarded
scheme; from an untrusted one the headers are ignored and every request is the proxy's own.
Real servers in this process (``inprocess.serving``), the same requests with the fast path on
and off (uvicorn's proxy-headers middleware then reads the headers in front of the app): the
same answers, the same clients charged, and the fast path served every request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import requests
from inprocess import serving
from servers import ServerProcess

from durable_streams_server import ServerConfig

TEXT = {"Content-Type": "text/plain"}
Answer = tuple[int, list[tuple[str, str]], bytes]
UNTRUSTED = "192.0.2.254"
"""A proxy address that is not the test client's."""


def _via(client: str, proto: str | None = None) -> dict[str, str]:
    headers = {"X-Forwarded-For": f"198.51.100.77, {client}"}  # (a hop before the proxy, as a chain has)
    if proto is not None:
        headers["X-Forwarded-Proto"] = proto
    return headers


def _answer(response: requests.Response, port: int) -> Answer:
    headers = sorted(
        (name.lower(), value.replace(f"127.0.0.1:{port}", "HOST"))
        for name, value in response.headers.items()
        if name.lower() not in ("date", "stream-cursor", "etag", "stream-incarnation")  # (per server, per moment)
    )
    return response.status_code, headers, response.content


def _script(http: requests.Session, url: str) -> list[Answer]:
    port = int(url.rsplit(":", 1)[1])
    stream = f"{url}/v1/stream/proxied"
    sent = [
        http.put(stream, headers={**TEXT, **_via("203.0.113.1", "https")}),  # A's first: Location's scheme
        http.post(stream, headers={**TEXT, **_via("203.0.113.1")}, data=b"a"),  # A's second
        http.post(stream, headers={**TEXT, **_via("203.0.113.1")}, data=b"a"),  # A's third: over the burst
        http.post(stream, headers={**TEXT, **_via("203.0.113.2", "http")}, data=b"b"),  # B's first
        http.get(stream, params={"offset": "-1"}, headers=_via("203.0.113.2")),  # B's second
        http.head(stream, headers=_via("203.0.113.3")),  # C's first
    ]
    return [_answer(response, port) for response in sent]


def _served(config: ServerConfig, fast_path: bool, allow: str | None) -> tuple[list[Answer], set[str], int]:
    """The script's answers, the clients the rate limit charged, and how many requests the fast path served."""
    with serving(config, fast_path=fast_path, forwarded_allow_ips=allow) as (url, server):
        with requests.Session() as http:
            http.trust_env = False
            answers = _script(http, url)
        limiter = server.app.policy.limits.rate_limiter
        assert limiter is not None
        charged = set(limiter._buckets)  # (the clients' keys)
        return answers, charged, server.fast_path.served if server.fast_path is not None else 0


@pytest.mark.parametrize(
    ("allow", "statuses", "charged", "scheme"),
    [
        (None, [201, 204, 429, 204, 200, 200], {"addr:203.0.113.1", "addr:203.0.113.2", "addr:203.0.113.3"}, "https"),
        (UNTRUSTED, [201, 204, 429, 429, 429, 429], {"addr:127.0.0.1"}, "http"),
    ],
    ids=["trusted-proxy", "untrusted-proxy"],
)
def test_forwarded_requests_take_the_fast_path_and_charge_the_client_the_app_would(
    tmp_path: Path, allow: str | None, statuses: list[int], charged: set[str], scheme: str
) -> None:
    config = ServerConfig(data_dir=tmp_path, rate_limit_rps=0.01, rate_limit_burst=2)
    fast = _served(replace(config, data_dir=tmp_path / "fast"), True, allow)
    plain = _served(replace(config, data_dir=tmp_path / "plain"), False, allow)
    answers, fast_charged, served = fast
    assert [status for status, _, _ in answers] == statuses
    assert ("location", f"{scheme}://HOST/v1/stream/proxied") in answers[0][1]
    assert fast_charged == charged
    assert served == len(statuses)  # every request, forwarding headers and all
    assert (answers, fast_charged, 0) == plain  # the app's answers, the app's clients


@pytest.mark.parametrize(("allow", "second"), [("127.0.0.1", 204), (UNTRUSTED, 429)], ids=["trusted", "untrusted"])
def test_the_command_lines_forwarded_allow_ips_names_the_trusted_proxies(
    server_factory: Callable[..., ServerProcess], allow: str, second: int
) -> None:
    """``--forwarded-allow-ips`` reaches uvicorn: one request each from two forwarded clients,
    with a burst of one, is two clients' first request only behind a trusted proxy."""
    server = server_factory("--rate-limit-rps", "0.01", "--rate-limit-burst", "1", "--forwarded-allow-ips", allow)
    stream = server.stream_url("cli-proxied")
    with requests.Session() as http:
        http.trust_env = False
        assert http.put(stream, headers={**TEXT, **_via("203.0.113.1")}).status_code == 201
        assert http.post(stream, headers={**TEXT, **_via("203.0.113.2")}, data=b"x").status_code == second
