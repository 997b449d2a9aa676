"""The harness's ``ServerProcess`` waits for the server it started, not for whatever answers on
its port: ``free_port`` finds a port free, and another process (a test on another xdist worker)
may listen on it before the server does. A first start moves to another port; a restart, which
clients' URLs name, keeps its port and says why it could not start."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from servers import PortTaken, ServerProcess, listener_on


def test_a_first_start_on_a_port_another_process_took_moves_to_a_free_one(tmp_path: Path) -> None:
    squatter = listener_on(0)
    taken = squatter.getsockname()[1]
    server = ServerProcess(tmp_path / "data", port=taken)
    try:
        server.start()
        assert server.port != taken and server.starts == 1
        assert (
            requests.put(server.stream_url("mine"), headers={"Content-Type": "text/plain"}, timeout=10).status_code
            == 201
        )
        assert requests.head(server.stream_url("mine"), timeout=10).status_code == 200
    finally:
        server.kill()
        squatter.close()


def test_a_restart_on_a_port_another_process_took_keeps_the_port_and_raises(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    port = server.port
    server.stop()
    squatter = listener_on(port)
    try:
        with pytest.raises(PortTaken, match="address already in use"):
            server.start()
        assert server.port == port
    finally:
        server.kill()
        squatter.close()
