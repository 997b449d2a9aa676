"""Shared fixtures: real servers on loopback, temp data directories, a moto S3 server, Azurite."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from servers import AzuriteServer, MotoServer, ServerProcess, session

_PYCACHE_ENV = "PYTHONPYCACHEPREFIX"
_JAVA_OPTIONS_ENV = "JDK_JAVA_OPTIONS"
_SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def pytest_configure(config: pytest.Config) -> None:
    """The environment of the processes the tests start: set once, inherited by all."""
    _keep_bytecode(config)
    _short_lived_jvms()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The test files with a slow test first, each file's tests kept together and in order.

    ``make test`` hands whole files to its workers (``--dist loadfile --no-loadscope-reorder``)
    in this order: the long files (cluster failovers, Spark queries, crash rounds) start first
    and the many short files fill the workers' ends, so no worker sits idle while another runs
    one last long file. The order is the same on every worker (xdist requires it)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)  # (stable: a file's order is kept)


def _keep_bytecode(config: pytest.Config) -> None:
    """Let the processes the tests start keep their compiled modules, out of the tree.

    With ``PYTHONDONTWRITEBYTECODE`` set, every process compiles each module it imports from a
    source without a cached ``.pyc`` again: a server start compiled its ~125 modules each time,
    about 0.3 s of CPU before it listens, paid by every server the suite starts.
    So the children (servers, cluster nodes, Spark's Python workers) write their bytecode to
    a directory of this run's instead (``PYTHONPYCACHEPREFIX``): still nothing in the tree,
    one compile per module per run. Without the setting, nothing changes."""
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None and _PYCACHE_ENV not in os.environ:
        os.environ[_PYCACHE_ENV] = tempfile.mkdtemp(prefix="durable-streams-tests-pycache-")
        config.add_cleanup(lambda: shutil.rmtree(os.environ.pop(_PYCACHE_ENV), ignore_errors=True))


def _short_lived_jvms() -> None:
    """Start the tests' JVMs (Spark's: the session, the queries run as processes of their own,
    the notebooks') as short-lived JVMs: the quick compiler only (``TieredStopAtLevel=1``: no
    C2, whose compiler threads compete with everything else for this machine's two cores while
    a JVM starts and warms up) and the serial collector (no parallel GC threads). Neither
    changes what a program does, only how fast it starts: a sink query process of 8,000 rows,
    two runs each way on a loaded machine, took 63-68 s instead of 85-107 s, its Spark session
    14-19 s instead of 30-41 s to start. The ``java`` launcher reads ``JDK_JAVA_OPTIONS``
    (printing a note to its stderr); options set there by the caller are left as they are."""
    os.environ.setdefault(_JAVA_OPTIONS_ENV, _SHORT_LIVED_JVM)


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start ``durable-streams-server`` subprocesses; all are stopped at teardown."""
    started: list[ServerProcess] = []

    def start(*extra_args: str, data_dir: Path | None = None) -> ServerProcess:
        server = ServerProcess(data_dir or tmp_path / f"data{len(started)}", extra_args).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()


@pytest.fixture
def server(server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    """One server with the embedded default storage and a short long-poll timeout."""
    return server_factory("--long-poll-timeout-ms", "500")


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer().start(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzuriteServer]:
    server = AzuriteServer().start(tmp_path_factory.mktemp("azurite"))
    yield server
    server.stop()


@pytest.fixture
def http() -> requests.Session:
    """A requests session that ignores proxy settings (all servers are on loopback)."""
    return session()
