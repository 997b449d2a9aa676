"""``durable-streams-server``: build the app from options (or environment) and run uvicorn."""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from .config import ServerConfig
from .http.app import create_app
from .http.auth import TOKENS_ENV, AuthConfigError, load_auth_config
from .http.connections import guarded_h11
from .protocol.webhook_rules import parse_networks

ENV_PREFIX = "DURABLE_STREAMS_"

# Fields every LogRecord has; the rest are the structured ``extra`` of one event.
# (uvicorn adds a ``color_message`` duplicate of the message: dropped.)
_STANDARD_RECORD_FIELDS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
}


class LogfmtFormatter(logging.Formatter):
    """``ts=… level=… logger=… msg=… key=value``: greppable, one event per line."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields.update({k: v for k, v in vars(record).items() if k not in _STANDARD_RECORD_FIELDS})
        line = " ".join(f"{key}={_logfmt_value(value)}" for key, value in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = {
            "ts": self.formatTime(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields.update({k: v for k, v in vars(record).items() if k not in _STANDARD_RECORD_FIELDS})
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info)
        return json.dumps(fields, default=str)


def _logfmt_value(value: object) -> str:
    text = str(value)
    return json.dumps(text) if (" " in text or "=" in text or not text) else text


def _env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


def _add(parser: argparse.ArgumentParser, flag: str, default: object, help: str, **kwargs: object) -> None:
    """An option whose default comes from ``DURABLE_STREAMS_<FLAG>`` when that is set."""
    raw = os.environ.get(_env_name(flag))
    kind = kwargs.get("type")
    value: object = default
    if raw is not None:
        try:
            if isinstance(default, bool):
                value = raw.strip().lower() in ("1", "true", "yes", "on")
            elif isinstance(default, list):
                value = [item for item in raw.split(",") if item]
            else:
                value = kind(raw) if callable(kind) else raw
        except ValueError:
            raise SystemExit(f"{_env_name(flag)}={raw!r} is not valid for {flag}") from None
    shown = f" (default {default})" if default not in (None, False, []) else ""
    parser.add_argument(flag, default=value, help=help + shown, **kwargs)  # type: ignore[arg-type]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="durable-streams-server",
        description="A Durable Streams protocol server storing streams in Delta Lake tables. "
        f"Every option can also be set with an environment variable {ENV_PREFIX}<OPTION> "
        "(e.g. DURABLE_STREAMS_PORT=8080, DURABLE_STREAMS_STORAGE_OPTION='k1=v1,k2=v2').",
    )
    _add(parser, "--host", "127.0.0.1", "address to bind")
    _add(parser, "--port", 4437, "port", type=int)
    _add(
        parser,
        "--data-dir",
        Path("./data"),
        "local state: the WAL, and the Delta table unless --storage-uri",
        type=Path,
    )
    _add(
        parser, "--storage-uri", None, "where the Delta table lives, e.g. s3://bucket/prefix (default <data-dir>/delta)"
    )
    _add(
        parser,
        "--storage-option",
        [],
        "KEY=VALUE passed to delta-rs's object store, e.g. AWS_ENDPOINT_URL=http://127.0.0.1:9000 (repeatable)",
        action="append",
        metavar="KEY=VALUE",
    )
    _add(
        parser,
        "--durability",
        "wal",
        "acknowledge appends after the local WAL fsync (wal) or after the Delta commit (delta)",
        choices=["wal", "delta"],
    )
    _add(parser, "--long-poll-timeout-ms", 30_000, "how long a long-poll waits for data", type=int)
    _add(parser, "--sse-reconnect-ms", 60_000, "SSE connections are closed after this long", type=int)
    _add(parser, "--max-body-bytes", 64 * 1024 * 1024, "larger request bodies get 413", type=int)
    _add(parser, "--max-read-bytes", 1024 * 1024, "about how many bytes one read response carries", type=int)
    _add(parser, "--max-header-bytes", 16 * 1024, "a larger request line + headers gets 431; 0: no limit", type=int)
    _add(
        parser,
        "--request-timeout-s",
        30.0,
        "a request head must arrive within this (else the connection is closed), a body too (else 408)",
        type=float,
    )
    _add(parser, "--keep-alive-timeout-s", 5, "idle keep-alive connections are closed after this", type=int)
    _add(parser, "--max-connections", 0, "more concurrent connections get uvicorn's 503; 0: no limit", type=int)
    _add(parser, "--max-live-readers", 0, "more concurrent long-polls + SSE streams get 503; 0: no limit", type=int)
    _add(parser, "--max-streams-per-bucket", 0, "creating a stream in a full bucket gets 409; 0: no limit", type=int)
    _add(
        parser,
        "--rate-limit-rps",
        0.0,
        "requests/s per token (per client address without auth); more get 429 + Retry-After; 0: off",
        type=float,
    )
    _add(parser, "--rate-limit-burst", 0, "requests a client may make at once; 0: one second's worth", type=int)
    _add(parser, "--flush-interval-ms", 1_000, "WAL mode: how often the WAL is flushed into Delta", type=int)
    _add(
        parser,
        "--max-wal-bytes",
        1024**3,
        "WAL mode: while the WAL holds more than this (Delta unreachable), writes get 503 + Retry-After",
        type=int,
    )
    _add(parser, "--tail-cache-bytes", 4 * 1024 * 1024, "flushed bytes kept in memory per stream", type=int)
    _add(
        parser,
        "--history-cache-bytes",
        64 * 1024 * 1024,
        "history read from Delta kept (read ahead) for the next sequential read, all streams; 0: off",
        type=int,
    )
    _add(parser, "--compaction-interval-s", 600.0, "seconds between compaction passes; 0 turns it off", type=float)
    _add(parser, "--vacuum-retention-hours", 1, "unreferenced data files older than this are deleted", type=int)
    _add(
        parser,
        "--auth-tokens-file",
        None,
        f"JSON list of bearer tokens with scopes (read|write|admin) and buckets/prefixes; turns auth on "
        f"(or put the JSON in {TOKENS_ENV})",
        type=Path,
    )
    _add(
        parser,
        "--allow-unauthenticated",
        False,
        "serve a non-loopback --host without tokens (e.g. behind an authenticating proxy)",
        action="store_true",
    )
    _add(
        parser,
        "--allow-private-webhook-urls",
        [],
        "CIDR networks webhook URLs may target although private, loopback or link-local (refused by default, "
        "SSRF protection), e.g. 127.0.0.0/8 for local development; http:// is allowed only to these (repeatable, "
        "or comma-separated)",
        action="append",
        metavar="CIDR",
    )
    _add(parser, "--webhook-retry-initial-ms", 1_000, "first webhook retry delay; doubles per failure", type=int)
    _add(parser, "--webhook-retry-max-ms", 60_000, "longest webhook retry delay", type=int)
    _add(parser, "--webhook-timeout-ms", 10_000, "a webhook receiver must answer within this", type=int)
    _add(parser, "--tls-certfile", None, "serve HTTPS with this PEM certificate (chain); needs --tls-keyfile")
    _add(parser, "--tls-keyfile", None, "the PEM private key of --tls-certfile (unencrypted)")
    _add(
        parser,
        "--log-level",
        "info",
        "info: start, stop and problems only",
        choices=["debug", "info", "warning", "error"],
    )
    _add(parser, "--log-format", "logfmt", "log line format", choices=["logfmt", "json"])
    _add(parser, "--access-log", False, "log every request", action="store_true")
    return parser


# Numeric options whose zero would mean "nothing works" (every request times out, every body
# is too large …) must be positive; the others may be 0, which documents "off" or "none".
_POSITIVE = (
    "port",
    "long_poll_timeout_ms",
    "sse_reconnect_ms",
    "max_body_bytes",
    "max_read_bytes",
    "request_timeout_s",
    "keep_alive_timeout_s",
    "flush_interval_ms",
    "max_wal_bytes",
    "webhook_retry_initial_ms",
    "webhook_retry_max_ms",
    "webhook_timeout_ms",
)
_NON_NEGATIVE = (
    "max_header_bytes",
    "max_connections",
    "max_live_readers",
    "max_streams_per_bucket",
    "rate_limit_rps",
    "rate_limit_burst",
    "tail_cache_bytes",
    "history_cache_bytes",
    "compaction_interval_s",
    "vacuum_retention_hours",
)


def check_ranges(args: argparse.Namespace) -> None:
    for name in _POSITIVE:
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be greater than 0, got {getattr(args, name)}")
    for name in _NON_NEGATIVE:
        if getattr(args, name) < 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be 0 or more, got {getattr(args, name)}")


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    check_ranges(args)
    options: dict[str, str] = {}
    for item in args.storage_option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--storage-option expects KEY=VALUE, got {item!r}")
        options[key.strip()] = value
    try:
        parse_networks(args.allow_private_webhook_urls)
    except ValueError as exc:
        raise SystemExit(f"--allow-private-webhook-urls: {exc}") from None
    try:
        auth = load_auth_config(args.auth_tokens_file, os.environ.get(TOKENS_ENV))
    except AuthConfigError as exc:
        raise SystemExit(str(exc)) from None
    return ServerConfig(
        data_dir=args.data_dir,
        storage_uri=args.storage_uri,
        storage_options=options,
        durability=args.durability,
        long_poll_timeout_ms=args.long_poll_timeout_ms,
        sse_reconnect_ms=args.sse_reconnect_ms,
        max_body_bytes=args.max_body_bytes,
        max_read_bytes=args.max_read_bytes,
        max_header_bytes=args.max_header_bytes,
        request_timeout_s=args.request_timeout_s,
        max_live_readers=args.max_live_readers,
        max_streams_per_bucket=args.max_streams_per_bucket,
        rate_limit_rps=args.rate_limit_rps,
        rate_limit_burst=args.rate_limit_burst,
        flush_interval_ms=args.flush_interval_ms,
        max_wal_bytes=args.max_wal_bytes,
        tail_cache_bytes=args.tail_cache_bytes,
        history_cache_bytes=args.history_cache_bytes,
        compaction_interval_s=args.compaction_interval_s,
        vacuum_retention_hours=args.vacuum_retention_hours,
        allow_private_webhook_urls=tuple(args.allow_private_webhook_urls),
        webhook_retry_initial_ms=args.webhook_retry_initial_ms,
        webhook_retry_max_ms=args.webhook_retry_max_ms,
        webhook_timeout_ms=args.webhook_timeout_ms,
        auth=auth,
    )


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def check_exposure(host: str, config: ServerConfig, allow_unauthenticated: bool) -> None:
    """Without tokens only loopback is served, unless the operator says the network is trusted."""
    if config.auth is not None or allow_unauthenticated:
        return
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = host.lower() == "localhost"
    if not loopback:
        raise SystemExit(
            f"refusing to serve --host {host} without authentication: configure bearer tokens with "
            f"--auth-tokens-file (or {TOKENS_ENV}), or pass --allow-unauthenticated if every client "
            "that can reach this address may read and write all streams (e.g. behind an authenticating proxy)"
        )


def check_tls(certfile: str | None, keyfile: str | None) -> None:
    """Fail at startup with a message naming the files, not later inside uvicorn."""
    if (certfile is None) != (keyfile is None):
        raise SystemExit("--tls-certfile and --tls-keyfile go together: give both or neither")
    if certfile is not None:
        try:  # the empty password makes an encrypted key fail here instead of prompting
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile, password="")
        except (OSError, ssl.SSLError) as exc:
            raise SystemExit(
                f"cannot serve HTTPS with --tls-certfile {certfile} and --tls-keyfile {keyfile}: {exc} "
                "(both must be PEM files, the key unencrypted and matching the certificate)"
            ) from None


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    config = config_from_args(args)
    check_exposure(args.host, config, args.allow_unauthenticated)
    check_tls(args.tls_certfile, args.tls_keyfile)
    auth = config.auth
    logging.getLogger("durable_streams_server").info(
        "starting",
        extra={
            "host": args.host,
            "port": args.port,
            "data_dir": str(config.data_dir),
            "auth": ",".join(grant.name for grant in auth.grants) if auth is not None else "off",
            "tls": args.tls_certfile is not None,
        },
    )
    uvicorn.run(
        create_app(config),
        host=args.host,
        port=args.port,
        log_config=None,
        access_log=args.access_log,
        timeout_graceful_shutdown=5,
        http=guarded_h11(config.request_timeout_s),
        h11_max_incomplete_event_size=config.max_header_bytes or None,
        timeout_keep_alive=args.keep_alive_timeout_s,
        # uvicorn counts the connection asking, so its limit is one above the connections served
        limit_concurrency=args.max_connections + 1 if args.max_connections else None,
        ssl_certfile=args.tls_certfile,
        ssl_keyfile=args.tls_keyfile,
    )


if __name__ == "__main__":
    main()
