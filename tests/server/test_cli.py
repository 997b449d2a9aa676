"""The command line: options, their environment-variable twins, and clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest

from durable_streams_server import ServerConfig
from durable_streams_server.cli import build_parser, config_from_args
from durable_streams_server.http.fastpath import HttpParser
from durable_streams_server.http.fastpath.guards import GuardedH11Protocol, GuardedHttpToolsProtocol
from durable_streams_server.http.fastpath.protocol import FastPathProtocol
from durable_streams_server.server import build_app, http_protocol


def test_defaults_match_the_documented_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in os.environ if name.startswith("DURABLE_STREAMS_")]:
        monkeypatch.delenv(name)
    args = build_parser().parse_args([])
    assert (args.host, args.port, args.data_dir, args.durability) == ("127.0.0.1", 4437, Path("data"), "wal")
    assert args.long_poll_timeout_ms == 30_000
    assert config_from_args(args).resolved_storage_uri == str(Path("data/delta").resolve())


def test_every_option_reads_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DURABLE_STREAMS_PORT", "8080")
    monkeypatch.setenv("DURABLE_STREAMS_DURABILITY", "delta")
    monkeypatch.setenv("DURABLE_STREAMS_STORAGE_URI", "s3://bucket/prefix")
    monkeypatch.setenv("DURABLE_STREAMS_STORAGE_OPTION", "AWS_REGION=eu-west-1,AWS_ALLOW_HTTP=true")
    monkeypatch.setenv("DURABLE_STREAMS_LONG_POLL_TIMEOUT_MS", "500")
    monkeypatch.setenv("DURABLE_STREAMS_ACCESS_LOG", "true")
    args = build_parser().parse_args(["--storage-option", "AWS_ENDPOINT_URL=http://127.0.0.1:9000"])
    config = config_from_args(args)
    assert (args.port, config.durability, config.storage_uri, config.long_poll_timeout_ms) == (
        8080,
        "delta",
        "s3://bucket/prefix",
        500,
    )
    assert dict(config.storage_options) == {
        "AWS_REGION": "eu-west-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
    }
    assert args.access_log is True


def test_command_line_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DURABLE_STREAMS_PORT", "8080")
    assert build_parser().parse_args(["--port", "9090"]).port == 9090


def test_malformed_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DURABLE_STREAMS_PORT", "eighty")
    with pytest.raises(SystemExit, match="DURABLE_STREAMS_PORT='eighty' is not valid for --port"):
        build_parser()


def test_malformed_storage_option_is_rejected() -> None:
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        config_from_args(build_parser().parse_args(["--storage-option", "no-equals-sign"]))


def test_help_lists_the_options() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "durable_streams_server", "--help"], capture_output=True, text=True, check=True
    )
    for option in ["--host", "--port", "--data-dir", "--storage-uri", "--storage-option", "--durability"]:
        assert option in result.stdout
    assert "--long-poll-timeout-ms" in result.stdout


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--request-timeout-s", "0"], "--request-timeout-s must be greater than 0, got 0.0"),
        (["--max-body-bytes", "-1"], "--max-body-bytes must be greater than 0, got -1"),
        (["--port", "0"], "--port must be greater than 0, got 0"),
        (["--port", "70000"], "--port must be at most 65535, got 70000"),
        (["--max-live-readers", "-3"], "--max-live-readers must be 0 or more, got -3"),
        (["--rate-limit-rps", "-0.5"], "--rate-limit-rps must be 0 or more, got -0.5"),
    ],
)
def test_out_of_range_numbers_are_refused_naming_the_option(flags: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        config_from_args(build_parser().parse_args(flags))


def test_zero_means_off_where_the_help_says_so() -> None:
    flags = [
        "--max-connections",
        "0",
        "--max-live-readers",
        "0",
        "--rate-limit-rps",
        "0",
        "--compaction-interval-s",
        "0",
    ]
    config = config_from_args(build_parser().parse_args(flags))
    assert (config.max_live_readers, config.rate_limit_rps, config.compaction_interval_s) == (0, 0.0, 0.0)


def test_fast_path_on_by_default_and_off_by_option_or_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DURABLE_STREAMS_FAST_PATH", raising=False)
    assert config_from_args(build_parser().parse_args([])).fast_path == "on"
    assert config_from_args(build_parser().parse_args(["--fast-path", "off"])).fast_path == "off"
    monkeypatch.setenv("DURABLE_STREAMS_FAST_PATH", "off")
    assert config_from_args(build_parser().parse_args([])).fast_path == "off"


def test_an_unknown_fast_path_value_is_refused_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--fast-path", "maybe"])
    assert "--fast-path: invalid choice: 'maybe'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("parser", "fast_path", "expected"),
    [
        ("httptools", "on", FastPathProtocol),
        ("httptools", "off", GuardedHttpToolsProtocol),
        ("h11", "on", GuardedH11Protocol),
        ("h11", "off", GuardedH11Protocol),
    ],
)
def test_the_fast_path_is_plugged_in_only_when_on_with_httptools(
    tmp_path: Path, parser: HttpParser, fast_path: Literal["on", "off"], expected: type
) -> None:
    """The protocol the CLI hands uvicorn: the head guards always, the fast path bound to the app
    only with ``--fast-path on`` and httptools."""
    config = ServerConfig(data_dir=tmp_path, fast_path=fast_path, request_timeout_s=7, max_header_bytes=999)
    app = build_app(config)
    protocol = http_protocol(app, config, parser)
    assert issubclass(protocol, expected)
    assert issubclass(protocol, FastPathProtocol) == (expected is FastPathProtocol)
    assert protocol.head_timeout_s == 7
    fast = getattr(protocol, "fast_path", None)
    assert (fast is not None and fast.app is app) == (expected is FastPathProtocol)


def test_forwarded_allow_ips_defaults_to_uvicorns_and_is_read_from_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DURABLE_STREAMS_FORWARDED_ALLOW_IPS", raising=False)
    assert build_parser().parse_args([]).forwarded_allow_ips is None  # (uvicorn's: $FORWARDED_ALLOW_IPS or loopback)
    assert build_parser().parse_args(["--forwarded-allow-ips", "10.0.0.0/8"]).forwarded_allow_ips == "10.0.0.0/8"
