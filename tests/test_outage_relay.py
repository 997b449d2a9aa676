"""The S3 outage relay (``outage_relay.S3Endpoint``) takes a port ``free_port`` found free a
moment before: another process (a test on another xdist worker) may listen on it first. Its
first start moves to another port; once started, clients hold its URL, and it keeps its port."""

from __future__ import annotations

import socket

import pytest
from outage_relay import S3Endpoint
from servers import listener_on


def test_a_first_start_on_a_port_another_process_took_moves_to_a_free_one() -> None:
    squatter, target = listener_on(0), listener_on(0)
    taken = squatter.getsockname()[1]
    relay = S3Endpoint(target.getsockname()[1])
    relay.port = taken
    try:
        relay.up()
        assert relay.port != taken
        with socket.create_connection(("127.0.0.1", relay.port), timeout=10):
            pass  # (the relay listens there)
        relay.down()
        squatter.close()
        squatter = listener_on(relay.port)  # (taken while the relay is down)
        port = relay.port
        with pytest.raises(RuntimeError, match="Address already in use"):
            relay.up()  # (started once: clients hold its URL, so it keeps its port and says why)
        assert relay.port == port
    finally:
        relay.close()
        squatter.close()
        target.close()
