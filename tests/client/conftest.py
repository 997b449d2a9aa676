"""Fixtures for the client tests: our server and the reference Node server, both real
processes on loopback, shared by the session (every test uses its own stream names)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from client_support import unique
from runner import ConformanceError, start_reference_server
from servers import ServerProcess

from pyspark_durable_streams.client import Backoff, Client, Stream

SSE_RECONNECT_MS = 1500
"""Our server closes SSE connections this often in the tests, so reconnection is exercised."""


@pytest.fixture(scope="session")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    args = ["--long-poll-timeout-ms", "500", "--sse-reconnect-ms", str(SSE_RECONNECT_MS)]
    server = ServerProcess(tmp_path_factory.mktemp("ours") / "data", args).start()
    yield server
    server.kill()


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The reference server's base URL; fails (never skips) when Node or the npm packages are missing."""
    try:
        server = start_reference_server(tmp_path_factory.mktemp("reference"), long_poll_timeout_ms=500)
    except ConformanceError as exc:
        pytest.fail(f"the reference server (npm @durable-streams/server, needs Node 20+) could not start: {exc}")
    with server:
        yield server.url


@pytest.fixture(params=["ours", "reference"])
def server_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def base_url(request: pytest.FixtureRequest, server_name: str) -> str:
    if server_name == "ours":
        return str(request.getfixturevalue("ours").url)
    return str(request.getfixturevalue("reference"))


@pytest.fixture
def client(base_url: str) -> Iterator[Client]:
    with Client(base_url, backoff=Backoff(deadline_s=10)) as client:
        yield client


@pytest.fixture
def our_client(ours: ServerProcess) -> Iterator[Client]:
    with Client(ours.url, backoff=Backoff(deadline_s=10)) as client:
        yield client


@pytest.fixture
def new_stream(client: Client) -> Callable[..., Stream]:
    """A handle on a fresh stream path under /v1/stream/ (created by the test)."""

    def make(prefix: str = "s") -> Stream:
        return client.stream(f"v1/stream/{unique(prefix)}")

    return make
