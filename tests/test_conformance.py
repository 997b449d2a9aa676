"""The public conformance suite (npm ``@durable-streams/server-conformance-tests``, pinned in
tests/conformance/package.json) against our server, on each storage configuration, and with the
fast path off (every request through the ASGI app).

A run takes about 60 s. Every test of the suite must pass, the opt-in "Reserved
subscription APIs" group included: its webhook receiver listens on 127.0.0.1, so the
server allows that network for webhooks (``--allow-private-webhook-urls``), and its test
that ``http://10.0.0.1/hook`` is refused checks that only the allowed network is.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from runner import ConformanceResult, ensure_installed, run_conformance
from servers import MotoServer, ServerProcess

# The suite waits for a long-poll 204 inside Vitest's 5 s test timeout; its webhook
# receivers run on loopback.
LONG_POLL = ("--long-poll-timeout-ms", "500", "--allow-private-webhook-urls", "127.0.0.0/8")
SUITE_TESTS = 338

# The suite runs each test within Vitest's 5 s timeout: `make test` runs these files alone
# (the `serial` mark), never beside the parallel workers.
pytestmark = pytest.mark.serial


def _assert_all_passed(result: ConformanceResult) -> None:
    failures = "\n".join(f"  {failure.full_name}: {failure.error}" for failure in result.failures)
    assert (result.passed, result.failed, result.skipped) == (SUITE_TESTS, 0, 0), f"{result.summary}\n{failures}"


@pytest.fixture(scope="module", autouse=True)
def _installed() -> None:
    ensure_installed()


@pytest.mark.slow
def test_conformance_local_delta_storage(server_factory: Callable[..., ServerProcess]) -> None:
    """With retention limits on every stream (the server's defaults) and maintenance passes every
    second: the protocol is the same with both extensions on (conditional appends always are)."""
    retention = ("--retention-max-age-s", "1d", "--retention-max-messages", "1000000", "--compaction-interval-s", "1")
    server = server_factory(*LONG_POLL, *retention)
    _assert_all_passed(run_conformance(server.url, include_subscriptions=True))


@pytest.mark.slow
def test_conformance_fast_path_off_reads_served_from_delta(server_factory: Callable[..., ServerProcess]) -> None:
    """Every request through uvicorn's request cycle and the ASGI app (``--fast-path off``; the
    other runs have it on), with no tail cache and a 50 ms flush: nearly every read of history
    goes to Delta files. The server answers the suite the same without the fast path."""
    server = server_factory(*LONG_POLL, "--fast-path", "off", "--tail-cache-bytes", "0", "--flush-interval-ms", "50")
    _assert_all_passed(run_conformance(server.url, include_subscriptions=True))


@pytest.mark.slow
def test_conformance_s3_storage(server_factory: Callable[..., ServerProcess], moto: MotoServer) -> None:
    bucket = f"conformance-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    server = server_factory(*LONG_POLL, *moto.server_args(f"s3://{bucket}/durable-streams"))
    _assert_all_passed(run_conformance(server.url, include_subscriptions=True))
