"""Every option of the ``durable_streams`` format, declared once and validated in one place.

Each option is an ``Option`` spec: its documented name, how its text is parsed and checked
(a parser that raises ``OptionError`` naming it), its default, and the field of
``ReadOptions`` / ``WriteOptions`` / ``ConnectionOptions`` it fills. The tables
``CONNECTION``, ``READ`` and ``WRITE`` list the specs each direction accepts; the parse
functions apply them and then check what involves several options at once (exactly one
target, mutually exclusive names, offsets naming streams that are read).

Names follow Spark's Kafka source where they fit (``startingOffsets``, ``endingOffsets``,
``maxMessagesPerTrigger``, ``failOnDataLoss`` …). Spark passes option names
case-insensitively, so they are compared lower-cased. A bad or unknown option raises
``OptionError`` naming it, at ``load()`` for reads and at ``save()``/``start()`` for writes.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ._source.offsets import EARLIEST

T = TypeVar("T")


class OptionError(ValueError):
    """A ``durable_streams`` option is missing, unknown or malformed; the message names it."""


@dataclass(frozen=True)
class Option(Generic[T]):
    """One option: ``parse(text, name)`` turns its text into its value or raises naming it."""

    name: str
    """As documented (camelCase); matched case-insensitively."""
    parse: Callable[[str, str], T]
    default: T
    field: str | None = None
    """The options-object field it fills by itself; None where the parse function combines it."""

    @property
    def key(self) -> str:
        return self.name.lower()

    def get(self, lowered: Mapping[str, str]) -> T:
        return self.parse(lowered[self.key], self.name) if self.key in lowered else self.default


# -- parsers: (text, option name) -> value ---------------------------------------------------


def text(raw: str, name: str) -> str | None:
    """Surrounding spaces dropped; empty means not given."""
    return raw.strip() or None


def verbatim(raw: str, name: str) -> str:
    return raw


def non_empty(raw: str, name: str) -> str:
    if not raw.strip():
        raise OptionError(f"option '{name}' must not be empty")
    return raw.strip()


def positive_int(raw: str, name: str) -> int:
    if not raw.strip().isdigit() or int(raw.strip()) <= 0:
        raise OptionError(f"option '{name}' must be a positive integer, got {raw!r}")
    return int(raw.strip())


def seconds_from_ms(raw: str, name: str) -> float:
    return positive_int(raw, name) / 1000


def epoch(raw: str, name: str) -> int:
    if not raw.strip().isdigit() or int(raw.strip()) > 2**53 - 1:
        raise OptionError(f"option '{name}' must be an integer between 0 and 2^53-1, got {raw!r}")
    return int(raw.strip())


def boolean(raw: str, name: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option '{name}' must be true or false, got {raw!r}")
    return value == "true"


def header_line(raw: str, name: str) -> tuple[str, str]:
    header, sep, value = raw.partition(":")
    if not sep or not header.strip() or not value.strip():
        raise OptionError(f"option '{name}' must look like 'Name: value'")
    return header.strip(), value.strip()


def one_of(*choices: str) -> Callable[[str, str], str | None]:
    def parse(raw: str, name: str) -> str | None:
        value = raw.strip().lower() or None
        if value is not None and value not in choices:
            raise OptionError(f"option '{name}' must be one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


_PROTOCOL_OFFSET = re.compile(r"[0-9A-Za-z_.:~-]{1,256}")
LATEST = "now"
"""Placeholder for "the tail when the query starts"; resolved to a real offset at once."""


Offsets = tuple[str, tuple[tuple[str, str], ...]]
"""A word (``earliest``, ``latest``) and no pairs, or ``json`` and stream -> offset pairs."""


def offsets(*words: str) -> Callable[[str, str], Offsets]:
    """One of ``words``, or a JSON object of stream -> offset (then ``("json", pairs)``)."""

    def parse(raw: str, name: str) -> Offsets:
        raw = raw.strip()
        if raw.lower() in words:
            return raw.lower(), ()
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            raise OptionError(f"option '{name}' must be {' or '.join(words)} or a JSON object, got {raw!r}") from exc
        if not isinstance(parsed, dict) or not parsed:
            raise OptionError(f"option '{name}' must be a non-empty JSON object of stream -> offset, got {raw!r}")
        pairs: list[tuple[str, str]] = []
        for stream, offset in parsed.items():
            if not isinstance(offset, str | int) or isinstance(offset, bool):
                raise OptionError(f"option '{name}': the offset of {stream!r} must be a string, got {offset!r}")
            value = {"earliest": EARLIEST, "latest": LATEST, "-2": EARLIEST}.get(str(offset).lower(), str(offset))
            if not _PROTOCOL_OFFSET.fullmatch(value):
                raise OptionError(f"option '{name}': {value!r} is not an offset (stream {stream!r})")
            pairs.append((str(stream).rstrip("/"), value))
        return "json", tuple(sorted(pairs))

    return parse


TEST_HOOKS_ENV = "DURABLE_STREAMS_TEST_HOOKS"
"""``_testFailAfterRequests`` is accepted only where this environment variable is ``1``."""


def hook_requests(raw: str, name: str) -> int:
    if os.environ.get(TEST_HOOKS_ENV) != "1":
        raise OptionError(f"option '{name}' is a test hook: set {TEST_HOOKS_ENV}=1 to use it")
    return positive_int(raw, name)


# -- connection options (both directions) ------------------------------------------------

TOKEN = Option("token", non_empty, None)
"""Sent as ``Authorization: Bearer …``; Spark redacts options named like ``token`` in plans."""
AUTH_HEADER = Option[tuple[str, str] | None]("authHeader", header_line, None)
"""A full ``Name: value`` header, for other schemes."""
REQUEST_TIMEOUT = Option("requestTimeoutMs", seconds_from_ms, 30.0, "timeout_s")
"""How long a request waits for the server's answer (the client's read timeout; ``_connect``)."""
CA_CERT_FILE = Option("caCertFile", non_empty, None, "ca_cert_file")
CONNECTION: tuple[Option[Any], ...] = (TOKEN, AUTH_HEADER, REQUEST_TIMEOUT, CA_CERT_FILE)
CONNECTION_OPTIONS = tuple(option.key for option in CONNECTION)


@dataclass(frozen=True)
class ConnectionOptions:
    """How to talk to the server: auth, timeouts and the CA to trust for https://."""

    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = REQUEST_TIMEOUT.default
    ca_cert_file: str | None = CA_CERT_FILE.default
    """A PEM CA bundle (or self-signed certificate) path valid on the driver and every executor."""


def parse_connection_options(options: Mapping[str, str]) -> ConnectionOptions:
    lowered = _lowered(options)
    if TOKEN.key in lowered and AUTH_HEADER.key in lowered:
        raise OptionError("options 'token' and 'authHeader' are mutually exclusive")
    token, header = TOKEN.get(lowered), AUTH_HEADER.get(lowered)
    headers = (("Authorization", f"Bearer {token}"),) if token is not None else ((header,) if header else ())
    return ConnectionOptions(headers, **_fields(CONNECTION, lowered))


def reject_unknown(lowered: Mapping[str, str], known: tuple[str, ...], direction: str) -> None:
    unknown = sorted(set(lowered) - set(known) - set(CONNECTION_OPTIONS))
    if unknown:
        raise OptionError(f"unknown {direction} option(s) for format 'durable_streams': {', '.join(unknown)}")


def _lowered(options: Mapping[str, str]) -> dict[str, str]:
    return {key.lower(): value for key, value in options.items()}


def _fields(table: tuple[Option[Any], ...], lowered: Mapping[str, str]) -> dict[str, Any]:
    """The values of the options that fill a field by themselves, keyed by that field."""
    return {option.field: option.get(lowered) for option in table if option.field is not None}


# Shared by both directions: where the streams are (checked together by each parse function).
URL = Option("url", text, None)
PATH = Option("path", text, None)
SERVER = Option("server", text, None)
BUCKET = Option("bucket", text, None)
FREEZE_WORKER_GC = Option("freezeWorkerGc", boolean, False, "freeze_worker_gc")
"""Tasks freeze their Python worker's objects out of the collection after every task (``_worker_gc``)."""

# -- write options -------------------------------------------------------------------------

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
    lowered = _lowered(options)
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
        **_fields(WRITE, lowered),
        connection=parse_connection_options(lowered),
        url=url,
        server=server,
        bucket=bucket,
    )


# -- read options --------------------------------------------------------------------------

VALUE_TYPES = ("binary", "string", "json")
STARTING = Option[Offsets]("startingOffsets", offsets("earliest", "latest"), ("earliest", ()))
ENDING = Option[Offsets]("endingOffsets", offsets("latest"), ("latest", ()))
READ: tuple[Option[Any], ...] = (
    PATH,
    URL,
    Option("urls", text, None),
    SERVER,
    BUCKET,
    Option("prefix", verbatim, "", "prefix"),
    STARTING,
    ENDING,
    Option("valueType", one_of(*VALUE_TYPES), None, "value_type"),
    Option("failOnDataLoss", boolean, True, "fail_on_data_loss"),
    Option("maxMessagesPerTrigger", positive_int, None, "max_messages_per_trigger"),
    Option("maxBytesPerTrigger", positive_int, None, "max_bytes_per_trigger"),
    Option("minPartitions", positive_int, None, "min_partitions"),
    Option("messagesPerPartition", positive_int, 100_000, "messages_per_partition"),
    Option("pollIntervalMs", positive_int, 250, "poll_interval_ms"),
    Option("historyReads", one_of("auto", "delta", "http"), "auto", "history_reads"),
    Option("localFiles", boolean, True, "local_files"),
    FREEZE_WORKER_GC,
)
READ_OPTIONS = tuple(option.key for option in READ)
_READ_DEFAULTS = {option.field: option.default for option in READ if option.field is not None}


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
    prefix: str = _READ_DEFAULTS["prefix"]
    starting: str = STARTING.default[0]
    starting_json: tuple[tuple[str, str], ...] = ()
    ending: str = ENDING.default[0]
    ending_json: tuple[tuple[str, str], ...] = ()
    max_messages_per_trigger: int | None = _READ_DEFAULTS["max_messages_per_trigger"]
    max_bytes_per_trigger: int | None = _READ_DEFAULTS["max_bytes_per_trigger"]
    fail_on_data_loss: bool = _READ_DEFAULTS["fail_on_data_loss"]
    min_partitions: int | None = _READ_DEFAULTS["min_partitions"]
    messages_per_partition: int = _READ_DEFAULTS["messages_per_partition"]
    value_type: str | None = _READ_DEFAULTS["value_type"]
    poll_interval_ms: int = _READ_DEFAULTS["poll_interval_ms"]
    history_reads: str = _READ_DEFAULTS["history_reads"]
    """``auto``: history from the Delta files where the server plans reads (``_source.direct_plans``),
    ``delta``: fail where it does not, ``http``: always over HTTP."""
    local_files: bool = _READ_DEFAULTS["local_files"]
    """Direct reads open the server's local data files where an executor sees them."""
    freeze_worker_gc: bool = FREEZE_WORKER_GC.default
    connection: ConnectionOptions = ConnectionOptions()

    @property
    def subscription(self) -> bool:
        return self.bucket is not None


_BUCKET_ID = re.compile(r"[a-z0-9_-]{4,64}")


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    """Validate every read option; raise ``OptionError`` naming the first bad one."""
    lowered = _lowered(options)
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
    starting, starting_json = STARTING.get(lowered)
    ending, ending_json = ENDING.get(lowered)
    if ending == "json" and any(value == EARLIEST for _, value in ending_json):
        raise OptionError("option 'endingOffsets' cannot use 'earliest' / -1")
    for name, mapping in ((STARTING.name, starting_json), (ENDING.name, ending_json)):
        unknown = sorted(key for key, _ in mapping if urls and key not in urls)
        if unknown:
            raise OptionError(f"option '{name}' names stream(s) that are not read: {', '.join(unknown)}")
    return ReadOptions(
        **_fields(READ, lowered),
        urls=urls,
        server=server.rstrip("/") if server and not urls else None,
        bucket=bucket if not urls else None,
        starting=starting,
        starting_json=starting_json,
        ending=ending,
        ending_json=ending_json,
        connection=connection,
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
