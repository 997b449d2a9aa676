"""The pieces every ``durable_streams`` option table is built from.

An ``Option`` spec holds an option's documented name, its parser (``(text, name) -> value``,
raising ``OptionError`` naming the option), its default and the options-object field it fills.
The parsers, the connection options (both directions) and the target options shared by reads
and writes live here; ``read.py`` and ``write.py`` hold each direction's table and the checks
that involve several options at once.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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


MAX_MILLIS = 2**53 - 1
"""The largest integer JSON readers (JavaScript's numbers) keep exact."""


def epoch(raw: str, name: str, what: str = "an integer between 0 and 2^53-1") -> int:
    """A non-negative integer up to ``MAX_MILLIS`` (a producer epoch; ``millis`` for times);
    ``what`` is how the error describes it."""
    if not raw.strip().isdigit() or int(raw.strip()) > MAX_MILLIS:
        raise OptionError(f"option '{name}' must be {what}, got {raw!r}")
    return int(raw.strip())


def millis(raw: str, name: str) -> int:
    """A time as milliseconds since the epoch (Kafka's ``startingTimestamp`` form)."""
    return epoch(raw, name, "milliseconds since the epoch (0 to 2^53-1)")


_DURATION = re.compile(r"(\d+)\s*(ms|s|sec|m|min|h|d)?")
_UNIT_S = {None: 0.001, "ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def duration_s(raw: str, name: str) -> float:
    """A duration as Spark writes them (``500ms``, ``30s``, ``15m``, ``1h``; a bare number is
    milliseconds), in seconds."""
    match = _DURATION.fullmatch(raw.strip().lower())
    if match is None:
        raise OptionError(f"option '{name}' must be a duration like 500ms, 30s, 15m or 1h, got {raw!r}")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def json_object(raw: str, name: str, invalid: str, of: str) -> dict[str, Any]:
    """A non-empty JSON object (``of``: what it maps); ``invalid`` is what the option must be, as
    the error for text that is no JSON says."""
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        raise OptionError(f"option '{name}' must be {invalid}, got {raw!r}") from exc
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(f"option '{name}' must be a non-empty JSON object of {of}, got {raw!r}")
    return parsed


def timestamps(raw: str, name: str) -> tuple[tuple[str, int], ...]:
    """A JSON object of stream -> milliseconds since the epoch."""
    parsed = json_object(raw, name, "a JSON object of stream -> timestamp (ms)", "stream -> timestamp (ms)")
    pairs = []
    for stream, value in parsed.items():
        text = str(value) if isinstance(value, int | str) and not isinstance(value, bool) else ""
        if not text.isdigit() or int(text) > MAX_MILLIS:
            raise OptionError(
                f"option '{name}': the timestamp of {stream!r} must be milliseconds since the epoch, got {value!r}"
            )
        pairs.append((str(stream).rstrip("/"), int(text)))
    return tuple(sorted(pairs))


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


LATEST = "now"
"""Placeholder for "the tail when the query starts"; resolved to a real offset at once."""


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
    lowered = lowered_keys(options)
    if TOKEN.key in lowered and AUTH_HEADER.key in lowered:
        raise OptionError("options 'token' and 'authHeader' are mutually exclusive")
    token, header = TOKEN.get(lowered), AUTH_HEADER.get(lowered)
    headers = (("Authorization", f"Bearer {token}"),) if token is not None else ((header,) if header else ())
    return ConnectionOptions(headers, **fields(CONNECTION, lowered))


def reject_unknown(lowered: Mapping[str, str], known: tuple[str, ...], direction: str) -> None:
    unknown = sorted(set(lowered) - set(known) - set(CONNECTION_OPTIONS))
    if unknown:
        raise OptionError(f"unknown {direction} option(s) for format 'durable_streams': {', '.join(unknown)}")


def lowered_keys(options: Mapping[str, str]) -> dict[str, str]:
    return {key.lower(): value for key, value in options.items()}


def fields(table: tuple[Option[Any], ...], lowered: Mapping[str, str]) -> dict[str, Any]:
    """The values of the options that fill a field by themselves, keyed by that field."""
    return {option.field: option.get(lowered) for option in table if option.field is not None}


# Shared by both directions: where the streams are (checked together by each parse function).
URL = Option("url", text, None)
PATH = Option("path", text, None)
SERVER = Option("server", text, None)
BUCKET = Option("bucket", text, None)
FREEZE_WORKER_GC = Option("freezeWorkerGc", boolean, False, "freeze_worker_gc")
"""Tasks freeze their Python worker's objects out of the collection after every task (``_worker_gc``)."""
