"""``connect``: the one client the connector makes (driver and executors) takes its headers,
timeouts and CA file from the connection options."""

from __future__ import annotations

from pyspark_durable_streams._connect import CONNECT_TIMEOUT_S, connect
from pyspark_durable_streams.client._http import FOLLOWS_REDIRECTS, RequestsTransport
from pyspark_durable_streams.options import parse_read_options, parse_write_options

URL = "https://127.0.0.1:1/v1/stream/x"
FOLLOWS = dict([FOLLOWS_REDIRECTS])  # every client says it follows a cluster node's redirects


def test_timeouts_headers_and_ca_come_from_the_connection_options() -> None:
    options = {"url": URL, "token": "t0k", "requestTimeoutMs": "60000", "caCertFile": "/etc/ca.pem"}
    for parse in (parse_read_options, parse_write_options):
        with connect(parse(options).connection, URL) as client:
            assert client.transport.timeout == (CONNECT_TIMEOUT_S, 60.0)
            assert client.transport.headers == {**FOLLOWS, "Authorization": "Bearer t0k"}
            transport = client.transport.transport
            assert isinstance(transport, RequestsTransport) and transport.verify == "/etc/ca.pem"


def test_a_short_request_timeout_bounds_connecting_too() -> None:
    connection = parse_read_options({"url": URL, "requestTimeoutMs": "2500", "authHeader": "X-Key: k"}).connection
    with connect(connection, URL) as client:
        assert client.transport.timeout == (2.5, 2.5)
        assert client.transport.headers == {**FOLLOWS, "X-Key": "k"}
        assert client.stream(URL).url == URL
