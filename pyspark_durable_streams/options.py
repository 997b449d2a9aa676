"""Every option of the ``durable_streams`` format, parsed and validated in one place.

Names follow Spark's Kafka source where they fit (``startingOffsets``, ``endingOffsets``,
``maxMessagesPerTrigger``, ``failOnDataLoss`` …). Spark passes option names
case-insensitively, so they are compared lower-cased. A bad or unknown option raises
``OptionError`` naming it, at ``load()`` for reads and at ``save()``/``start()`` for writes.

Sections: connection options shared by both directions; read options (``ReadOptions``,
used by ``source.py``); write options (``WriteOptions``, used by ``sink.py``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ._offsets import EARLIEST


class OptionError(ValueError):
    """A ``durable_streams`` option is missing, unknown or malformed; the message names it."""


# -- connection options (both directions) ------------------------------------------------


@dataclass(frozen=True)
class ConnectionOptions:
    """How to talk to the server: auth, timeouts and the CA to trust for https://."""

    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 30.0
    ca_cert_file: str | None = None
    """A PEM CA bundle (or self-signed certificate) path valid on the driver and every executor."""


CONNECTION_OPTIONS = ("token", "authheader", "requesttimeoutms", "cacertfile")


def parse_connection_options(options: Mapping[str, str]) -> ConnectionOptions:
    """``token`` (sent as ``Authorization: Bearer …``; Spark redacts options named like
    ``token`` in plans), ``authHeader`` (a full ``Name: value`` header, for other schemes),
    ``requestTimeoutMs`` and ``caCertFile``."""
    lowered = {key.lower(): value for key, value in options.items()}
    headers: list[tuple[str, str]] = []
    if "token" in lowered and "authheader" in lowered:
        raise OptionError("options 'token' and 'authHeader' are mutually exclusive")
    if "token" in lowered:
        if not lowered["token"].strip():
            raise OptionError("option 'token' must not be empty")
        headers.append(("Authorization", f"Bearer {lowered['token'].strip()}"))
    if "authheader" in lowered:
        name, sep, value = lowered["authheader"].partition(":")
        if not sep or not name.strip() or not value.strip():
            raise OptionError("option 'authHeader' must look like 'Name: value'")
        headers.append((name.strip(), value.strip()))
    timeout_s = 30.0
    if "requesttimeoutms" in lowered:
        timeout_s = positive_int(lowered, "requesttimeoutms", "requestTimeoutMs") / 1000
    ca_cert_file = lowered.get("cacertfile")
    if ca_cert_file is not None and not ca_cert_file.strip():
        raise OptionError("option 'caCertFile' must not be empty")
    return ConnectionOptions(tuple(headers), timeout_s, ca_cert_file.strip() if ca_cert_file else None)


def positive_int(lowered: Mapping[str, str], key: str, display: str) -> int:
    raw = lowered[key].strip()
    if not raw.isdigit() or int(raw) <= 0:
        raise OptionError(f"option '{display}' must be a positive integer, got {lowered[key]!r}")
    return int(raw)


def reject_unknown(lowered: Mapping[str, str], known: tuple[str, ...], direction: str) -> None:
    unknown = sorted(set(lowered) - set(known) - set(CONNECTION_OPTIONS))
    if unknown:
        raise OptionError(f"unknown {direction} option(s) for format 'durable_streams': {', '.join(unknown)}")


# -- write options -------------------------------------------------------------------------

TEST_HOOKS_ENV = "DURABLE_STREAMS_TEST_HOOKS"
"""``_testFailAfterRequests`` is accepted only where this environment variable is ``1``."""

WRITE_OPTIONS = (
    "url",
    "path",
    "server",
    "bucket",
    "contenttype",
    "createstream",
    "ttlseconds",
    "closestream",
    "maxbatchbytes",
    "maxbatchmessages",
    "maxrequestsinflight",
    "deliverytimeoutms",
    "producerid",
    "producerepoch",
    "checkpointlocation",  # passed by Spark for streaming writes; read for the query id
    "queryname",  # passed by Spark for streaming writes with .queryName(); not used
    "_testfailafterrequests",
)


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
    content_type: str | None = None
    create_stream: bool = False
    ttl_seconds: int | None = None
    close_stream: bool = False
    max_batch_bytes: int = 1024 * 1024
    max_batch_messages: int = 10_000
    max_requests_in_flight: int = 4
    delivery_timeout_s: float = 120.0
    producer_id: str | None = None
    producer_epoch: int | None = None
    checkpoint_location: str | None = None
    test_fail_after_requests: int | None = None


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Validate every write option; raises ``OptionError`` naming the first bad one."""
    import os

    lowered = {key.lower(): value for key, value in options.items()}
    reject_unknown(lowered, WRITE_OPTIONS, "write")
    if "url" in lowered and "path" in lowered and lowered["url"] != lowered["path"]:
        raise OptionError("give the target stream once: option 'url' and save(path) disagree")
    url = (lowered.get("url") or lowered.get("path") or "").strip() or None
    server = (lowered.get("server") or "").strip() or None
    if (url is None) == (server is None):
        raise OptionError(
            "the durable_streams sink needs exactly one target: option 'url' (one stream) "
            "or option 'server' (each row's 'stream' column names its stream)"
        )
    for name, value in (("url", url), ("server", server)):
        if value is not None and not value.startswith(("http://", "https://")):
            raise OptionError(f"option '{name}' must be an http:// or https:// URL, got {value!r}")
    bucket = (lowered.get("bucket") or "").strip() or None
    if bucket is not None and server is None:
        raise OptionError("option 'bucket' needs option 'server' (with 'url' the URL names the stream)")
    producer_id = lowered.get("producerid")
    if producer_id is not None and not producer_id.strip():
        raise OptionError("option 'producerId' must not be empty")
    hook = None
    if "_testfailafterrequests" in lowered:
        if os.environ.get(TEST_HOOKS_ENV) != "1":
            raise OptionError(f"option '_testFailAfterRequests' is a test hook: set {TEST_HOOKS_ENV}=1 to use it")
        hook = positive_int(lowered, "_testfailafterrequests", "_testFailAfterRequests")
    content_type = (lowered.get("contenttype") or "").strip() or None
    return WriteOptions(
        connection=parse_connection_options(lowered),
        url=url,
        server=server,
        bucket=bucket,
        content_type=content_type,
        create_stream=_bool(lowered, "createstream", "createStream"),
        ttl_seconds=positive_int(lowered, "ttlseconds", "ttlSeconds") if "ttlseconds" in lowered else None,
        close_stream=_bool(lowered, "closestream", "closeStream"),
        max_batch_bytes=_int_or(lowered, "maxbatchbytes", "maxBatchBytes", 1024 * 1024),
        max_batch_messages=_int_or(lowered, "maxbatchmessages", "maxBatchMessages", 10_000),
        max_requests_in_flight=_int_or(lowered, "maxrequestsinflight", "maxRequestsInFlight", 4),
        delivery_timeout_s=_int_or(lowered, "deliverytimeoutms", "deliveryTimeoutMs", 120_000) / 1000,
        producer_id=producer_id.strip() if producer_id is not None else None,
        producer_epoch=_non_negative_int(lowered, "producerepoch", "producerEpoch"),
        checkpoint_location=(lowered.get("checkpointlocation") or "").strip() or None,
        test_fail_after_requests=hook,
    )


def _bool(lowered: Mapping[str, str], key: str, display: str) -> bool:
    raw = lowered.get(key, "false").strip().lower()
    if raw not in ("true", "false"):
        raise OptionError(f"option '{display}' must be true or false, got {lowered[key]!r}")
    return raw == "true"


def _int_or(lowered: Mapping[str, str], key: str, display: str, default: int) -> int:
    return positive_int(lowered, key, display) if key in lowered else default


def _non_negative_int(lowered: Mapping[str, str], key: str, display: str) -> int | None:
    if key not in lowered:
        return None
    raw = lowered[key].strip()
    if not raw.isdigit() or int(raw) > 2**53 - 1:
        raise OptionError(f"option '{display}' must be an integer between 0 and 2^53-1, got {lowered[key]!r}")
    return int(raw)


# -- read options --------------------------------------------------------------------------

READ_OPTIONS = (
    "path",
    "url",
    "urls",
    "server",
    "bucket",
    "prefix",
    "startingoffsets",
    "endingoffsets",
    "maxmessagespertrigger",
    "maxbytespertrigger",
    "failondataloss",
    "minpartitions",
    "messagesperpartition",
    "valuetype",
    "pollintervalms",
)
VALUE_TYPES = ("binary", "string", "json")
LATEST = "now"
"""Placeholder for "the tail when the query starts"; resolved to a real offset at once."""


@dataclass(frozen=True)
class ReadOptions:
    """Everything ``source.py`` needs: which streams, where to start and stop, how fast.

    Streams are named by ``urls`` (options ``url``/``urls``/``path``: full stream URLs), or by a
    bucket subscription (``server`` + ``bucket`` + ``prefix``), whose streams are keyed by their
    bucket-local id. ``starting``/``ending`` hold ``earliest``/``latest`` or ``json``, in which
    case ``*_json`` maps stream keys to protocol offsets (``-1`` = earliest, ``now`` = latest).
    """

    urls: tuple[str, ...] = ()
    server: str | None = None
    bucket: str | None = None
    prefix: str = ""
    starting: str = "earliest"
    starting_json: tuple[tuple[str, str], ...] = ()
    ending: str = "latest"
    ending_json: tuple[tuple[str, str], ...] = ()
    max_messages_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    messages_per_partition: int = 100_000
    value_type: str | None = None
    poll_interval_ms: int = 250
    connection: ConnectionOptions = ConnectionOptions()

    @property
    def subscription(self) -> bool:
        return self.bucket is not None


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    """Validate every read option; raise ``OptionError`` naming the first bad one."""
    lowered = {key.lower(): value for key, value in options.items()}
    reject_unknown(lowered, READ_OPTIONS, "read")
    connection = parse_connection_options(lowered)
    urls = _read_urls(lowered)
    server, bucket = lowered.get("server", "").strip() or None, lowered.get("bucket", "").strip() or None
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
    starting, starting_json = _offsets_option(lowered, "startingoffsets", "startingOffsets", ("earliest", "latest"))
    ending, ending_json = _offsets_option(lowered, "endingoffsets", "endingOffsets", ("latest",))
    if ending == "json" and any(value == EARLIEST for _, value in ending_json):
        raise OptionError("option 'endingOffsets' cannot use 'earliest' / -1")
    for display, mapping in (("startingOffsets", starting_json), ("endingOffsets", ending_json)):
        unknown = sorted(key for key, _ in mapping if urls and key not in urls)
        if unknown:
            raise OptionError(f"option '{display}' names stream(s) that are not read: {', '.join(unknown)}")
    value_type = lowered.get("valuetype", "").strip().lower() or None
    if value_type is not None and value_type not in VALUE_TYPES:
        raise OptionError(f"option 'valueType' must be one of {', '.join(VALUE_TYPES)}, got {lowered['valuetype']!r}")
    fail_raw = lowered.get("failondataloss", "true").strip().lower()
    if fail_raw not in ("true", "false"):
        raise OptionError(f"option 'failOnDataLoss' must be true or false, got {lowered['failondataloss']!r}")

    def optional(key: str, display: str) -> int | None:
        return positive_int(lowered, key, display) if key in lowered else None

    return ReadOptions(
        urls=urls,
        server=server.rstrip("/") if server and not urls else None,
        bucket=bucket if not urls else None,
        prefix=lowered.get("prefix", ""),
        starting=starting,
        starting_json=starting_json,
        ending=ending,
        ending_json=ending_json,
        max_messages_per_trigger=optional("maxmessagespertrigger", "maxMessagesPerTrigger"),
        max_bytes_per_trigger=optional("maxbytespertrigger", "maxBytesPerTrigger"),
        fail_on_data_loss=fail_raw == "true",
        min_partitions=optional("minpartitions", "minPartitions"),
        messages_per_partition=optional("messagesperpartition", "messagesPerPartition") or 100_000,
        value_type=value_type,
        poll_interval_ms=optional("pollintervalms", "pollIntervalMs") or 250,
        connection=connection,
    )


_BUCKET_ID = re.compile(r"[a-z0-9_-]{4,64}")
_PROTOCOL_OFFSET = re.compile(r"[0-9A-Za-z_.:~-]{1,256}")


def _read_urls(lowered: Mapping[str, str]) -> tuple[str, ...]:
    given = [key for key in ("url", "urls", "path") if lowered.get(key, "").strip()]
    if len(given) > 1:
        raise OptionError(f"options {' and '.join(repr(k) for k in given)} are mutually exclusive")
    if not given:
        return ()
    urls = tuple(url.strip().rstrip("/") for url in lowered[given[0]].split(",") if url.strip())
    display = {"url": "url", "urls": "urls", "path": "path"}[given[0]]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise OptionError(f"option '{display}' must hold full http(s) stream URLs, got {url!r}")
    if len(set(urls)) != len(urls):
        raise OptionError(f"option '{display}' names a stream twice")
    return urls


def _offsets_option(
    lowered: Mapping[str, str], key: str, display: str, words: tuple[str, ...]
) -> tuple[str, tuple[tuple[str, str], ...]]:
    raw = lowered.get(key, words[0]).strip()
    if raw.lower() in words:
        return raw.lower(), ()
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        raise OptionError(f"option '{display}' must be {' or '.join(words)} or a JSON object, got {raw!r}") from exc
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(f"option '{display}' must be a non-empty JSON object of stream -> offset, got {raw!r}")
    pairs: list[tuple[str, str]] = []
    for stream, offset in parsed.items():
        if not isinstance(offset, str | int) or isinstance(offset, bool):
            raise OptionError(f"option '{display}': the offset of {stream!r} must be a string, got {offset!r}")
        value = {"earliest": EARLIEST, "latest": LATEST, "-2": EARLIEST}.get(str(offset).lower(), str(offset))
        if not _PROTOCOL_OFFSET.fullmatch(value):
            raise OptionError(f"option '{display}': {value!r} is not an offset (stream {stream!r})")
        pairs.append((str(stream).rstrip("/"), value))
    return "json", tuple(sorted(pairs))
