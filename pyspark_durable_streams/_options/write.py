"""The sink's options: the ``WRITE`` table, ``WriteOptions`` and ``parse_write_options``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .common import (
    BUCKET,
    FREEZE_WORKER_GC,
    PATH,
    SERVER,
    URL,
    ConnectionOptions,
    Option,
    OptionError,
    boolean,
    epoch,
    fields,
    hook_requests,
    lowered_keys,
    non_empty,
    parse_connection_options,
    positive_int,
    reject_unknown,
    seconds_from_ms,
    text,
)

WRITE: tuple[Option[Any], ...] = (
    URL,
    PATH,
    SERVER,
    BUCKET,
    Option("producerId", non_empty, None, "producer_id"),
    Option("_testFailAfterRequests", hook_requests, None, "test_fail_after_requests"),
    Option("contentType", text, None, "content_type"),
    Option("createStream", boolean, False, "create_stream"),
    Option("ttlSeconds", positive_int, None, "ttl_seconds"),
    Option("closeStream", boolean, False, "close_stream"),
    Option("maxBatchBytes", positive_int, 1024 * 1024, "max_batch_bytes"),
    Option("maxBatchMessages", positive_int, 10_000, "max_batch_messages"),
    Option("maxRequestsInFlight", positive_int, 4, "max_requests_in_flight"),
    Option("deliveryTimeoutMs", seconds_from_ms, 120.0, "delivery_timeout_s"),
    Option("producerEpoch", epoch, None, "producer_epoch"),
    Option("checkpointLocation", text, None, "checkpoint_location"),  # passed by Spark: read for the query id
    Option("queryName", text, None),  # passed by Spark for streaming writes with .queryName(); not used
    FREEZE_WORKER_GC,
)
WRITE_OPTIONS = tuple(option.key for option in WRITE)
_WRITE_DEFAULTS = {option.field: option.default for option in WRITE if option.field is not None}


@dataclass(frozen=True)
class WriteOptions:
    """Where and how ``sink.py`` appends.

    Exactly one target: ``url`` (one stream; ``save(path)`` counts as ``url``) or ``server``
    (each row names its stream in a ``stream`` column, taken as a stream id inside ``bucket``
    when given, else as a path under ``/v1/stream/``, or a server path if it starts with ``/``).
    """

    connection: ConnectionOptions
    url: str | None = None
    server: str | None = None
    bucket: str | None = None
    content_type: str | None = _WRITE_DEFAULTS["content_type"]
    create_stream: bool = _WRITE_DEFAULTS["create_stream"]
    ttl_seconds: int | None = _WRITE_DEFAULTS["ttl_seconds"]
    close_stream: bool = _WRITE_DEFAULTS["close_stream"]
    max_batch_bytes: int = _WRITE_DEFAULTS["max_batch_bytes"]
    max_batch_messages: int = _WRITE_DEFAULTS["max_batch_messages"]
    max_requests_in_flight: int = _WRITE_DEFAULTS["max_requests_in_flight"]
    delivery_timeout_s: float = _WRITE_DEFAULTS["delivery_timeout_s"]
    producer_id: str | None = _WRITE_DEFAULTS["producer_id"]
    producer_epoch: int | None = _WRITE_DEFAULTS["producer_epoch"]
    checkpoint_location: str | None = _WRITE_DEFAULTS["checkpoint_location"]
    test_fail_after_requests: int | None = _WRITE_DEFAULTS["test_fail_after_requests"]
    freeze_worker_gc: bool = FREEZE_WORKER_GC.default


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Validate every write option; raises ``OptionError`` naming the first bad one."""
    lowered = lowered_keys(options)
    reject_unknown(lowered, WRITE_OPTIONS, "write")
    if URL.key in lowered and PATH.key in lowered and lowered[URL.key] != lowered[PATH.key]:
        raise OptionError("give the target stream once: option 'url' and save(path) disagree")
    url, server = URL.get(lowered) or PATH.get(lowered), SERVER.get(lowered)
    if (url is None) == (server is None):
        raise OptionError(
            "the durable_streams sink needs exactly one target: option 'url' (one stream) "
            "or option 'server' (each row's 'stream' column names its stream)"
        )
    for name, value in (("url", url), ("server", server)):
        if value is not None and not value.startswith(("http://", "https://")):
            raise OptionError(f"option '{name}' must be an http:// or https:// URL, got {value!r}")
    bucket = BUCKET.get(lowered)
    if bucket is not None and server is None:
        raise OptionError("option 'bucket' needs option 'server' (with 'url' the URL names the stream)")
    return WriteOptions(
        **fields(WRITE, lowered),
        connection=parse_connection_options(lowered),
        url=url,
        server=server,
        bucket=bucket,
    )
