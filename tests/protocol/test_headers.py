"""Request header syntax: TTL, Expires-At, Stream-Closed, producer headers, content types."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from durable_streams_server.protocol.errors import BadRequest
from durable_streams_server.protocol.headers import (
    MAX_SAFE_INTEGER,
    ProducerHeaders,
    is_closed_flag,
    is_text_like,
    normalize_content_type,
    parse_content_type,
    parse_expires_at,
    parse_producer,
    parse_ttl,
)


@pytest.mark.parametrize(("raw", "expected"), [("0", 0), ("1", 1), ("3600", 3600), (str(MAX_SAFE_INTEGER), 2**53 - 1)])
def test_parse_ttl_valid(raw: str, expected: int) -> None:
    assert parse_ttl(raw) == expected


def test_parse_ttl_absent() -> None:
    assert parse_ttl(None) is None


BAD_TTLS = ["+3600", "03600", "00", "3600.0", "3.6e3", "1e3", "-1", "-0", "", " 1", "1 ", "abc", "\u0661", "9" * 40]


@pytest.mark.parametrize("raw", [*BAD_TTLS, str(MAX_SAFE_INTEGER + 1)])
def test_parse_ttl_invalid(raw: str) -> None:
    with pytest.raises(BadRequest) as excinfo:
        parse_ttl(raw)
    assert excinfo.value.code == "INVALID_TTL"


UTC = timezone(timedelta(0))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2030-01-02T03:04:05Z", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2030-01-02t03:04:05z", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2030-01-02T03:04:05+00:00", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2030-01-02T03:04:05.5Z", datetime(2030, 1, 2, 3, 4, 5, 500000, tzinfo=UTC)),
        ("2030-01-02T03:04:05.123456Z", datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)),
        ("2030-01-02T03:04:05+05:30", datetime(2030, 1, 1, 21, 34, 5, tzinfo=UTC)),
        ("2030-01-02T03:04:05.25-08:00", datetime(2030, 1, 2, 11, 4, 5, 250000, tzinfo=UTC)),
    ],
)
def test_parse_expires_at_valid(raw: str, expected: datetime) -> None:
    parsed = parse_expires_at(raw)
    assert parsed is not None
    assert parsed.utcoffset() is not None
    assert parsed == expected


def test_parse_expires_at_keeps_offset() -> None:
    parsed = parse_expires_at("2030-01-02T03:04:05-08:00")
    assert parsed is not None
    assert parsed.utcoffset() == timedelta(hours=-8)
    assert parse_expires_at(None) is None


@pytest.mark.parametrize(
    "raw",
    [
        "2030-01-02T03:04:05",
        "2030-01-02T03:04:05.5",
        "2030-01-02",
        "2030-01-02Z",
        "03:04:05Z",
        "2030-01-02 03:04:05Z",
        "2030-01-02T03:04Z",
        "2030-01-02T03:04:05+0530",
        "2030-01-02T03:04:05+05",
        "2030-13-02T03:04:05Z",
        "2030-02-30T03:04:05Z",
        "2030-01-02T25:04:05Z",
        "1735689600",
        "tomorrow",
        "",
    ],
)
def test_parse_expires_at_invalid(raw: str) -> None:
    with pytest.raises(BadRequest) as excinfo:
        parse_expires_at(raw)
    assert excinfo.value.code == "INVALID_EXPIRES_AT"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("True", True),
        ("tRuE", True),
        (None, False),
        ("", False),
        ("false", False),
        ("1", False),
        ("yes", False),
        ("truee", False),
        ("t", False),
    ],
)
def test_is_closed_flag(raw: str | None, expected: bool) -> None:
    assert is_closed_flag(raw) is expected


def test_parse_producer_all_or_none() -> None:
    assert parse_producer(None, None, None) is None
    assert parse_producer("p-1", "3", "7") == ProducerHeaders("p-1", 3, 7)
    assert parse_producer("p", "0", str(MAX_SAFE_INTEGER)) == ProducerHeaders("p", 0, MAX_SAFE_INTEGER)


@pytest.mark.parametrize(
    ("producer_id", "epoch", "seq"),
    [
        ("p", "0", None),
        ("p", None, "0"),
        (None, "0", "0"),
        ("p", None, None),
        (None, "0", None),
        (None, None, "0"),
        ("", "0", "0"),
        ("   ", "0", "0"),
        ("p", "", "0"),
        ("p", "x", "0"),
        ("p", "1.0", "0"),
        ("p", "-1", "0"),
        ("p", "+1", "0"),
        ("p", "1e3", "0"),
        ("p", str(MAX_SAFE_INTEGER + 1), "0"),
        ("p", "0", ""),
        ("p", "0", "x"),
        ("p", "0", "2.5"),
        ("p", "0", "-1"),
        ("p", "0", str(MAX_SAFE_INTEGER + 1)),
        ("p", "0", "\u0663"),
    ],
)
def test_parse_producer_invalid(producer_id: str | None, epoch: str | None, seq: str | None) -> None:
    with pytest.raises(BadRequest) as excinfo:
        parse_producer(producer_id, epoch, seq)
    assert excinfo.value.status == 400
    assert excinfo.value.code == "INVALID_PRODUCER"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, ""),
        ("application/json", "application/json"),
        ("Application/JSON; charset=utf-8", "application/json"),
        ("  text/plain ;charset=ascii", "text/plain"),
        ("application/octet-stream", "application/octet-stream"),
    ],
)
def test_normalize_content_type(raw: str | None, expected: str) -> None:
    assert normalize_content_type(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("", None),
        ("   ", None),
        ("text/plain", "text/plain"),
        (" application/json; charset=utf-8 ", "application/json; charset=utf-8"),
        ("application/vnd.api+json", "application/vnd.api+json"),
    ],
)
def test_parse_content_type_valid(raw: str | None, expected: str | None) -> None:
    assert parse_content_type(raw) == expected


@pytest.mark.parametrize("raw", ["json", "text/", "/plain", "text/plain/extra", "text plain", "a/b c", "tëxt/plain"])
def test_parse_content_type_invalid(raw: str) -> None:
    with pytest.raises(BadRequest) as excinfo:
        parse_content_type(raw)
    assert excinfo.value.code == "INVALID_CONTENT_TYPE"


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("text/plain", True),
        ("TEXT/HTML; charset=utf-8", True),
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("application/ndjson", False),
        ("application/octet-stream", False),
        ("image/png", False),
        ("application/x-text", False),
        ("", False),
    ],
)
def test_is_text_like(content_type: str, expected: bool) -> None:
    assert is_text_like(content_type) is expected
