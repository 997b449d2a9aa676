"""The server's logging: quiet by default (one line per event worth an operator's attention),
every library's request lines shown only when asked for with ``--log-level debug``."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from durable_streams_server.log_format import configure_logging


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root, httpx = logging.getLogger(), logging.getLogger("httpx")
    handlers, levels = root.handlers[:], (root.level, httpx.level)
    yield
    root.handlers[:] = handlers
    root.setLevel(levels[0])
    httpx.setLevel(levels[1])


@pytest.mark.parametrize(("level", "httpx_level"), [("info", logging.WARNING), ("debug", logging.DEBUG)])
def test_httpx_request_lines_only_at_debug(level: str, httpx_level: int) -> None:
    """httpx logs each request at info: a cluster's shard servers ask every few seconds."""
    configure_logging(level, "logfmt")
    assert logging.getLogger("httpx").getEffectiveLevel() == httpx_level
    assert logging.getLogger("durable_streams_server.cluster").getEffectiveLevel() == logging.getLevelName(
        level.upper()
    )
