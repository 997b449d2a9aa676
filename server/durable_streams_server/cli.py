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


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(ENV_PREFIX + name, default)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="durable-streams-server",
        description="A Durable Streams protocol server storing streams in Delta Lake tables. "
        f"Every option can also be set with an environment variable {ENV_PREFIX}<OPTION> "
        "(e.g. DURABLE_STREAMS_PORT=8080, DURABLE_STREAMS_STORAGE_OPTIONS='k1=v1,k2=v2').",
    )
    parser.add_argument("--host", default=_env("HOST", "127.0.0.1"), help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=int(_env("PORT", "4437") or 4437), help="port (default 4437)")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(_env("DATA_DIR", "./data") or "./data"),
        help="local state: the WAL, and the Delta table unless --storage-uri is set (default ./data)",
    )
    parser.add_argument(
        "--storage-uri",
        default=_env("STORAGE_URI"),
        help="where the Delta table lives, e.g. s3://bucket/prefix (default <data-dir>/delta)",
    )
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[item for item in (_env("STORAGE_OPTIONS") or "").split(",") if item],
        metavar="KEY=VALUE",
        help="option passed to delta-rs's object store, e.g. AWS_ENDPOINT_URL=http://127.0.0.1:9000 (repeatable)",
    )
    parser.add_argument(
        "--durability",
        choices=["wal", "delta"],
        default=_env("DURABILITY", "wal"),
        help="acknowledge appends after the local WAL fsync (wal, default) or after the Delta commit (delta)",
    )
    parser.add_argument(
        "--long-poll-timeout-ms",
        type=int,
        default=int(_env("LONG_POLL_TIMEOUT_MS", "30000") or 30000),
        help="how long a long-poll waits for data (default 30000)",
    )
    parser.add_argument(
        "--sse-reconnect-ms",
        type=int,
        default=int(_env("SSE_RECONNECT_MS", "60000") or 60000),
        help="SSE connections are closed after this long so clients reconnect (default 60000)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=int(_env("MAX_BODY_BYTES", str(64 * 1024 * 1024)) or 0),
        help="largest accepted request body; larger ones get 413 (default 64 MiB)",
    )
    parser.add_argument(
        "--max-read-bytes",
        type=int,
        default=int(_env("MAX_READ_BYTES", str(1024 * 1024)) or 0),
        help="about how many bytes one read response carries (default 1 MiB)",
    )
    parser.add_argument(
        "--flush-interval-ms",
        type=int,
        default=int(_env("FLUSH_INTERVAL_MS", "1000") or 1000),
        help="WAL mode: how often the WAL is flushed into Delta (default 1000)",
    )
    parser.add_argument(
        "--tail-cache-bytes",
        type=int,
        default=int(_env("TAIL_CACHE_BYTES", str(4 * 1024 * 1024)) or 0),
        help="flushed bytes kept in memory per stream for fast tail reads; older reads go to Delta (default 4 MiB)",
    )
    parser.add_argument(
        "--log-level",
        default=_env("LOG_LEVEL", "info"),
        choices=["debug", "info", "warning", "error"],
        help="default info: start, stop and problems only",
    )
    parser.add_argument("--log-format", default=_env("LOG_FORMAT", "logfmt"), choices=["logfmt", "json"])
    parser.add_argument(
        "--access-log",
        action="store_true",
        default=_env("ACCESS_LOG") == "1",
        help="log every request (off by default)",
    )
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
