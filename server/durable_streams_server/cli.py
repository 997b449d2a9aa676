"""``durable-streams-server``: build the app from options (or environment) and run uvicorn."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from .config import ServerConfig
from .http.app import create_app

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
    _add(parser, "--flush-interval-ms", 1_000, "WAL mode: how often the WAL is flushed into Delta", type=int)
    _add(parser, "--tail-cache-bytes", 4 * 1024 * 1024, "flushed bytes kept in memory per stream", type=int)
    _add(parser, "--compaction-interval-s", 600.0, "seconds between compaction passes; 0 turns it off", type=float)
    _add(parser, "--vacuum-retention-hours", 1, "unreferenced data files older than this are deleted", type=int)
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


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    options: dict[str, str] = {}
    for item in args.storage_option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--storage-option expects KEY=VALUE, got {item!r}")
        options[key.strip()] = value
    return ServerConfig(
        data_dir=args.data_dir,
        storage_uri=args.storage_uri,
        storage_options=options,
        durability=args.durability,
        long_poll_timeout_ms=args.long_poll_timeout_ms,
        sse_reconnect_ms=args.sse_reconnect_ms,
        max_body_bytes=args.max_body_bytes,
        max_read_bytes=args.max_read_bytes,
        flush_interval_ms=args.flush_interval_ms,
        tail_cache_bytes=args.tail_cache_bytes,
        compaction_interval_s=args.compaction_interval_s,
        vacuum_retention_hours=args.vacuum_retention_hours,
    )


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    config = config_from_args(args)
    logging.getLogger("durable_streams_server").info(
        "starting", extra={"host": args.host, "port": args.port, "data_dir": str(config.data_dir)}
    )
    uvicorn.run(
        create_app(config),
        host=args.host,
        port=args.port,
        log_config=None,
        access_log=args.access_log,
        timeout_graceful_shutdown=5,
    )


if __name__ == "__main__":
    main()
