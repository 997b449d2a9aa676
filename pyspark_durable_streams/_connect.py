"""The connector's one way to the server: ``connect`` makes the client every part of it uses,
on the driver (schema, planning, tails, stream creation) and on executors (reads, direct
reads' files, appends).

One timeout story, from the connection options: ``requestTimeoutMs`` bounds how long a request
waits for the server's answer (requests' read timeout: between bytes, not for a whole body),
and connecting gets at most ``CONNECT_TIMEOUT_S`` of it, so an unreachable host fails fast
while a slow answer is waited for. What is retried, and for how long, is each caller's own
policy: reads back off for the client's default deadline, appends for ``deliveryTimeoutMs``.
"""

from __future__ import annotations

from .client import Client
from .options import ConnectionOptions

CONNECT_TIMEOUT_S = 10.0


def connect(connection: ConnectionOptions, base_url: str) -> Client:
    """A client of the server at ``base_url`` (a stream URL will do: full URLs are used as
    they are; a bucket subscription's needs the server's base URL) with the connection
    options' headers, timeouts and CA file. The caller closes it."""
    timeout = connection.timeout_s
    return Client(
        base_url,
        headers=dict(connection.headers),
        timeout=(min(CONNECT_TIMEOUT_S, timeout), timeout),
        verify=connection.ca_cert_file,
    )
