"""The source's options: the ``READ`` table, ``ReadOptions`` and ``parse_read_options``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
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
    duration_s,
    fields,
    lowered_keys,
    one_of,
    parse_connection_options,
    positive_int,
    reject_unknown,
    text,
    verbatim,
)
from .range_limits import (
    BY_TIMESTAMP,
    ENDING,
    ENDING_TIMESTAMP,
    STARTING,
    STARTING_TIMESTAMP,
    STRATEGY,
    EarliestStart,
    End,
    LatestEnd,
    Start,
    check_range,
    resolve_end,
    resolve_start,
)

_CONSUMER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~:@-]{0,199}")


def consumer_name(raw: str, name: str) -> str:
    """A named consumer, as the server accepts it (``protocol/consumers.py``)."""
    if not _CONSUMER.fullmatch(raw):
        raise OptionError(
            f"option '{name}' must be 1 to 200 characters of A-Z a-z 0-9 . _ ~ : @ -, starting with a letter "
            f"or digit, got {raw!r}"
        )
    return raw


VALUE_TYPES = ("binary", "string", "json")
MIN_MESSAGES = Option[int | None]("minMessagesPerTrigger", positive_int, None, "min_messages_per_trigger")
MAX_DELAY = Option("maxTriggerDelay", duration_s, 15 * 60.0, "max_trigger_delay_s")
READ: tuple[Option[Any], ...] = (
    PATH,
    URL,
    Option("urls", text, None),
    SERVER,
    BUCKET,
    Option("prefix", verbatim, "", "prefix"),
    STARTING,
    ENDING,
    STARTING_TIMESTAMP,
    ENDING_TIMESTAMP,
    BY_TIMESTAMP,
    STRATEGY,
    MIN_MESSAGES,
    MAX_DELAY,
    Option("valueType", one_of(*VALUE_TYPES), None, "value_type"),
    Option("failOnDataLoss", boolean, True, "fail_on_data_loss"),
    Option("maxMessagesPerTrigger", positive_int, None, "max_messages_per_trigger"),
    Option("maxBytesPerTrigger", positive_int, None, "max_bytes_per_trigger"),
    Option("minPartitions", positive_int, None, "min_partitions"),
    Option("messagesPerPartition", positive_int, 100_000, "messages_per_partition"),
    Option("pollIntervalMs", positive_int, 50, "poll_interval_ms"),
    Option("consumer", consumer_name, None, "consumer"),
    Option("historyReads", one_of("auto", "delta", "http"), "auto", "history_reads"),
    Option("localFiles", boolean, True, "local_files"),
    Option("filterPushdown", boolean, False, "filter_pushdown"),
    FREEZE_WORKER_GC,
)
READ_OPTIONS = tuple(option.key for option in READ)
_READ_DEFAULTS = {option.field: option.default for option in READ if option.field is not None}


@dataclass(frozen=True)
class ReadOptions:
    """Everything ``source.py`` needs: which streams, where to start and stop, how fast.

    Streams are named by ``urls`` (options ``url``/``urls``/``path``: full stream URLs), or by a
    bucket subscription (``server`` + ``bucket`` + ``prefix``), whose streams are keyed by their
    bucket-local id. ``start`` and ``end`` are where a read starts and ends, each one of a
    closed set of kinds (``_options.range_limits``).
    """

    urls: tuple[str, ...] = ()
    server: str | None = None
    bucket: str | None = None
    prefix: str = _READ_DEFAULTS["prefix"]
    start: Start = field(default_factory=EarliestStart)
    end: End = field(default_factory=LatestEnd)
    max_messages_per_trigger: int | None = _READ_DEFAULTS["max_messages_per_trigger"]
    max_bytes_per_trigger: int | None = _READ_DEFAULTS["max_bytes_per_trigger"]
    fail_on_data_loss: bool = _READ_DEFAULTS["fail_on_data_loss"]
    min_messages_per_trigger: int | None = _READ_DEFAULTS["min_messages_per_trigger"]
    max_trigger_delay_s: float = _READ_DEFAULTS["max_trigger_delay_s"]
    """With ``min_messages_per_trigger``: a batch waits for that many messages at most this long."""
    min_partitions: int | None = _READ_DEFAULTS["min_partitions"]
    messages_per_partition: int = _READ_DEFAULTS["messages_per_partition"]
    value_type: str | None = _READ_DEFAULTS["value_type"]
    poll_interval_ms: int = _READ_DEFAULTS["poll_interval_ms"]
    history_reads: str = _READ_DEFAULTS["history_reads"]
    """``auto``: history from the Delta files where the server plans reads (``_source.direct_plans``),
    ``delta``: fail where it does not, ``http``: always over HTTP."""
    local_files: bool = _READ_DEFAULTS["local_files"]
    """Direct reads open the server's local data files where an executor sees them."""
    consumer: str | None = None
    """Record each committed batch's end on the server as this named consumer (``_source.consumer_progress``)."""
    freeze_worker_gc: bool = FREEZE_WORKER_GC.default
    filter_pushdown: bool = _READ_DEFAULTS["filter_pushdown"]
    """Batch reads narrow their plan by filters on ``stream``, ``offset``, ``timestamp`` (``_source.pushdown``)."""
    connection: ConnectionOptions = field(default_factory=ConnectionOptions)

    @property
    def subscription(self) -> bool:
        return self.bucket is not None


_BUCKET_ID = re.compile(r"[a-z0-9_-]{4,64}")


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    """Validate every read option; raise ``OptionError`` naming the first bad one."""
    lowered = lowered_keys(options)
    reject_unknown(lowered, READ_OPTIONS, "read")
    connection = parse_connection_options(lowered)
    urls = _read_urls(lowered)
    server, bucket = SERVER.get(lowered), BUCKET.get(lowered)
    if urls and (server or bucket):
        raise OptionError("options 'url'/'urls' and 'server'/'bucket' are mutually exclusive: name streams one way")
    if not urls:
        if not server or not bucket:
            raise OptionError("name the streams to read: option 'url', 'urls', or 'server' + 'bucket' (+ 'prefix')")
        if "://" not in server:
            raise OptionError(f"option 'server' must be a base URL like http://host:4437, got {server!r}")
        if not _BUCKET_ID.fullmatch(bucket):
            raise OptionError(f"option 'bucket' must match ^[a-z0-9_-]{{4,64}}$, got {bucket!r}")
    elif "prefix" in lowered:
        raise OptionError("option 'prefix' needs 'server' + 'bucket' (a bucket subscription)")
    start, end = resolve_start(lowered), resolve_end(lowered)
    _check_pacing(lowered)
    check_range(start, end, urls)
    return ReadOptions(
        **fields(READ, lowered),
        urls=urls,
        server=server.rstrip("/") if server and not urls else None,
        bucket=bucket if not urls else None,
        start=start,
        end=end,
        connection=connection,
    )


def _check_pacing(lowered: Mapping[str, str]) -> None:
    """The trigger shaping options make sense together."""
    if MAX_DELAY.key in lowered and MIN_MESSAGES.key not in lowered:
        raise OptionError("option 'maxTriggerDelay' needs option 'minMessagesPerTrigger' (it bounds that wait)")
    if MAX_DELAY.key in lowered and MAX_DELAY.get(lowered) <= 0:
        raise OptionError(f"option 'maxTriggerDelay' must be more than 0, got {lowered[MAX_DELAY.key]!r}")
    minimum, maximum = MIN_MESSAGES.get(lowered), lowered.get("maxmessagespertrigger")
    if minimum is not None and maximum is not None and maximum.strip().isdigit() and minimum > int(maximum):
        raise OptionError(
            f"option 'minMessagesPerTrigger' ({minimum}) must not exceed 'maxMessagesPerTrigger' ({maximum.strip()})"
        )


def _read_urls(lowered: Mapping[str, str]) -> tuple[str, ...]:
    given = [key for key in ("url", "urls", "path") if lowered.get(key, "").strip()]
    if len(given) > 1:
        raise OptionError(f"options {' and '.join(repr(k) for k in given)} are mutually exclusive")
    if not given:
        return ()
    urls = tuple(url.strip().rstrip("/") for url in lowered[given[0]].split(",") if url.strip())
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise OptionError(f"option '{given[0]}' must hold full http(s) stream URLs, got {url!r}")
    if len(set(urls)) != len(urls):
        raise OptionError(f"option '{given[0]}' names a stream twice")
    return urls
