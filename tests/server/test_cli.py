"""The command line: options, their environment-variable twins, and clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from durable_streams_server.cli import build_parser, config_from_args


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
