"""The server is an ASGI app users can mount in their own application."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from durable_streams_server import ServerConfig, create_app


def test_mounted_app_starts_on_first_request_and_recovers_its_data(tmp_path: Path) -> None:
    """Starlette sends no lifespan events to mounted apps: the server starts itself."""
    config = ServerConfig(data_dir=tmp_path / "data")
    outer = Starlette(routes=[Mount("/streams", app=create_app(config))])
    with TestClient(outer) as client:
        url = "/streams/v1/stream/mounted"
        assert client.put(url, headers={"Content-Type": "text/plain"}, content=b"hello").status_code == 201
        assert client.post(url, headers={"Content-Type": "text/plain"}, content=b" world").status_code == 204
        assert client.get(url).text == "hello world"

    # A second app on the same data directory recovers from the WAL (no shutdown flush ran).
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
