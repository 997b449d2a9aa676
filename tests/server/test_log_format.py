"""The server's logging: quiet by default (one line per event worth an operator's attention),
every library's request lines shown only when asked for with ``--log-level debug``."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest

from durable_streams_server.log_format import LogfmtFormatter, configure_logging


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


def test_a_logfmt_line_has_the_time_to_the_millisecond_and_the_event_fields() -> None:
    record = logging.LogRecord("durable_streams_server.cluster", logging.INFO, __file__, 1, "shard acquired", (), None)
    record.created, record.msecs, record.shard = 1_700_000_000.25, 250.0, 2
    line = LogfmtFormatter().format(record)
    assert re.fullmatch(
        r"ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.250 level=info logger=durable_streams_server\.cluster "
        r'msg="shard acquired" shard=2',
        line,
    ), line
