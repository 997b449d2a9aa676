"""The server is an ASGI app users can mount in their own application."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from durable_streams_server import ServerConfig, create_app
from durable_streams_server.storage.data_dir_lock import DataDirInUse


def _serve_mounted_then_crash(data_dir: str) -> None:
    """In a process of its own: a mounted app's first writes, then the process ends at once, no
    shutdown run (Starlette sends mounted apps none anyway), as a crash ends it."""
    config = ServerConfig(data_dir=Path(data_dir))
    with TestClient(Starlette(routes=[Mount("/streams", app=create_app(config))])) as client:
        url = "/streams/v1/stream/mounted"
        assert client.put(url, headers={"Content-Type": "text/plain"}, content=b"hello").status_code == 201
        assert client.post(url, headers={"Content-Type": "text/plain"}, content=b" world").status_code == 204
        assert client.get(url).text == "hello world"
        os._exit(0)


def test_mounted_app_starts_on_first_request_and_recovers_its_data(tmp_path: Path) -> None:
    """Starlette sends no lifespan events to mounted apps: the server starts itself. The first app
    runs in a process of its own, which ends without any shutdown (one process per data dir:
    ``storage/data_dir_lock.py``); a second app on the data dir recovers from the WAL."""
    first = multiprocessing.get_context("spawn").Process(
        target=_serve_mounted_then_crash, args=(str(tmp_path / "data"),)
    )
    first.start()
    first.join(120)
    assert first.exitcode == 0
    config = ServerConfig(data_dir=tmp_path / "data")
    with TestClient(Starlette(routes=[Mount("/streams", app=create_app(config))])) as client:
        response = client.get("/streams/v1/stream/mounted", params={"offset": "-1"})
        assert response.text == "hello world"
        assert response.headers["Stream-Next-Offset"] == "0000000000000002_0000000000000000"


def test_standalone_app_lifespan_flushes_on_shutdown(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path / "data", flush_interval_ms=600_000)
    with TestClient(create_app(config)) as client:
        client.put("/v1/stream/s", headers={"Content-Type": "text/plain"}, content=b"persisted")
    # The shutdown flush moved everything into Delta and emptied the WAL.
    wal_bytes = sum(path.stat().st_size for path in (tmp_path / "data" / "wal").glob("*.wal"))
    assert wal_bytes == 0
    with TestClient(create_app(config)) as client:
        assert client.get("/v1/stream/s").text == "persisted"


def test_a_second_app_on_a_data_dir_in_use_is_refused_until_the_first_shuts_down(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path / "data")
    with TestClient(create_app(config)) as first:
        assert first.put("/v1/stream/s", headers={"Content-Type": "text/plain"}, content=b"one").status_code == 201
        with (
            pytest.raises(DataDirInUse, match=rf"in use by another server \(pid {os.getpid()}, "),
            TestClient(create_app(config)),
        ):
            pass
        assert first.post("/v1/stream/s", headers={"Content-Type": "text/plain"}, content=b" two").status_code == 204
    with TestClient(create_app(config)) as second:  # (its lifespan's shutdown closed the storage, and the lock)
        assert second.get("/v1/stream/s").text == "one two"
