"""The harness's ``ServerProcess`` waits for the server it started, not for whatever answers on
its port: ``free_port`` finds a port free, and another process (a test on another xdist worker)
may listen on it before the server does. A first start moves to another port; a restart, which
clients' URLs name, keeps its port and says why it could not start. ``free_port`` itself hands
out ports of this process's own slice, below the kernel's ephemeral range, in turn; and
``listening_ports`` sees a busy process's listening socket at every look."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import requests
from servers import PortTaken, ServerProcess, _port_slice, free_port, listener_on, listening_ports


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


def test_free_ports_come_from_this_processs_slice_in_turn_and_skip_one_in_use() -> None:
    ports = _port_slice()
    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert ports.stop <= ephemeral and len(ports) >= 1000
    first = free_port()
    squatted = first + 1 if first + 1 in ports else ports.start
    squatter = listener_on(squatted)
    try:
        given = [free_port() for _ in range(50)]
    finally:
        squatter.close()
    assert all(port in ports for port in [first, *given]) and len({first, *given}) == 51
    assert squatted not in given  # (in use: skipped)


def test_a_process_that_opens_and_closes_files_still_listens(tmp_path: Path) -> None:
    """``listening_ports`` lists a process's descriptors, then reads each one's link: one closed in
    between used to make the whole process look like it listened on nothing (a busy shard server
    went missing from a node's listening children for one look)."""
    listener = listener_on(0)
    port = listener.getsockname()[1]
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            for at in range(64):
                (tmp_path / f"f{at}").open("w").close()

    churner = threading.Thread(target=churn)
    churner.start()
    try:
        missing = sum(port not in listening_ports(os.getpid()) for _ in range(500))
    finally:
        stop.set()
        churner.join()
        listener.close()
    assert missing == 0
