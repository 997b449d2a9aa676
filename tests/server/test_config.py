"""``ServerConfig`` checks itself, so an embedder mounting the ASGI app gets the CLI's checks,
and the CLI's defaults are the config's."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from durable_streams_server import ServerConfig
from durable_streams_server.cli import build_parser, config_from_args
from durable_streams_server.config import ConfigError
from durable_streams_server.settings import CLUSTER_SECRET_ENV


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"request_timeout_s": 0}, "request_timeout_s must be greater than 0, got 0"),
        ({"max_body_bytes": -1}, "max_body_bytes must be greater than 0, got -1"),
        ({"flush_interval_ms": 0}, "flush_interval_ms must be greater than 0, got 0"),
        ({"max_live_readers": -3}, "max_live_readers must be 0 or more, got -3"),
        ({"rate_limit_rps": -0.5}, "rate_limit_rps must be 0 or more, got -0.5"),
        ({"compaction_interval_s": -1.0}, "compaction_interval_s must be 0 or more, got -1.0"),
        ({"long_poll_timeout_ms": "30000"}, "long_poll_timeout_ms must be a number, got '30000'"),
        ({"max_header_bytes": True}, "max_header_bytes must be a number, got True"),
        ({"durability": "fast"}, "durability must be one of wal, delta, got 'fast'"),
        ({"fast_path": "yes"}, "fast_path must be on or off, got 'yes'"),
        ({"webhook_timeout_ms": 0}, "webhook_timeout_ms must be greater than 0, got 0"),
        (
            {"webhook_retry_max_ms": 500, "webhook_retry_initial_ms": 1000},
            "webhook_retry_max_ms must be at least webhook_retry_initial_ms (1000), got 500",
        ),
        (
            {"allow_private_webhook_urls": ("127.0.0.0/8", "intranet")},
            "allow_private_webhook_urls not a network (CIDR) or address: 'intranet'",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_field(values: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        ServerConfig(**values)  # type: ignore[arg-type]
    assert str(raised.value) == message
    assert raised.value.field == next(iter(values))


def test_zero_is_accepted_where_it_means_off() -> None:
    config = ServerConfig(max_header_bytes=0, max_live_readers=0, rate_limit_rps=0, compaction_interval_s=0)
    assert (config.max_header_bytes, config.rate_limit_rps, config.compaction_interval_s) == (0, 0, 0)


def test_the_cli_defaults_are_the_configs(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in os.environ if name.startswith("DURABLE_STREAMS_")]:
        monkeypatch.delenv(name)
    assert config_from_args(build_parser().parse_args([])) == ServerConfig()


def test_every_config_field_has_its_option() -> None:
    options = {action.dest for action in build_parser()._actions}
    fields = {field.name for field in dataclasses.fields(ServerConfig)}
    # --storage-option, --auth-tokens-file, and the cluster's credential (environment only: never on a command line)
    assert fields - options == {"storage_options", "auth", "cluster_secret"}


def test_the_cluster_secret_comes_from_the_environment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    shard = ["--cluster-shard", "0/2", "--cluster-router", "http://127.0.0.1:1"]
    assert config_from_args(build_parser().parse_args(shard)).cluster_secret is None
    monkeypatch.setenv(CLUSTER_SECRET_ENV, "s3cret")
    assert config_from_args(build_parser().parse_args(shard)).cluster_secret == "s3cret"
    assert config_from_args(build_parser().parse_args([])).cluster_secret is None  # (a shard server's only)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--cluster-secret", "x"])


def test_the_cli_reports_a_config_error_as_its_option() -> None:
    with pytest.raises(SystemExit, match=r"^--flush-interval-ms must be greater than 0, got 0$"):
        config_from_args(build_parser().parse_args(["--flush-interval-ms", "0"]))
    with pytest.raises(SystemExit, match=r"^--keep-alive-timeout-s must be greater than 0, got 0$"):
        config_from_args(build_parser().parse_args(["--keep-alive-timeout-s", "0"]))
    assert config_from_args(build_parser().parse_args(["--data-dir", "elsewhere"])).data_dir == Path("elsewhere")


def test_allowed_webhook_networks_come_from_the_option_and_its_environment_twin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed = build_parser().parse_args(["--allow-private-webhook-urls", "127.0.0.0/8,::1/128"])
    assert config_from_args(parsed).allow_private_webhook_urls == ("127.0.0.0/8,::1/128",)
    monkeypatch.setenv("DURABLE_STREAMS_ALLOW_PRIVATE_WEBHOOK_URLS", "10.0.0.0/8,192.168.0.0/16")
    assert config_from_args(build_parser().parse_args([])).allow_private_webhook_urls == (
        "10.0.0.0/8",
        "192.168.0.0/16",
    )
    with pytest.raises(SystemExit, match=r"^--allow-private-webhook-urls not a network \(CIDR\) or address: 'x'$"):
        config_from_args(build_parser().parse_args(["--allow-private-webhook-urls", "x"]))
