"""``durable-streams-server``: build the app from options (or environment) and run uvicorn."""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import logging
import os
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import get_args

import uvicorn

from .allocators import tune_allocators
from .cluster.workers import die_with_parent
from .collector import freeze_start_up_objects
from .config import ConfigError, ServerConfig, require_number
from .http.cluster_secret import CLUSTER_SECRET_ENV
from .http.fastpath import HttpParser
from .log_format import configure_logging
from .protocol.tokens import AuthConfig, AuthConfigError, parse_tokens
from .server import build_app, http_protocol
from .storage.committer import Durability
from .storage.ownership import TakeOver

ENV_PREFIX = "DURABLE_STREAMS_"
TOKENS_ENV = "DURABLE_STREAMS_AUTH_TOKENS"
DEFAULTS = ServerConfig()
"""The CLI's defaults for the options that configure the server are the config's."""


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


def _add_config(parser: argparse.ArgumentParser, flag: str, help: str, **kwargs: object) -> None:
    """An option setting the ``ServerConfig`` field of the same name, with that field's default."""
    default = getattr(DEFAULTS, flag.lstrip("-").replace("-", "_"))
    if isinstance(default, int | float | Path):
        kwargs.setdefault("type", Path if isinstance(default, Path) else type(default))
    _add(parser, flag, default, help, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="durable-streams-server",
        description="A Durable Streams protocol server storing streams in Delta Lake tables. "
        f"Every option can also be set with an environment variable {ENV_PREFIX}<OPTION> "
        "(e.g. DURABLE_STREAMS_PORT=8080, DURABLE_STREAMS_STORAGE_OPTION='k1=v1,k2=v2').",
        allow_abbrev=False,  # (an option is named whole: a prefix never stands for another option)
    )
    _add(parser, "--host", "127.0.0.1", "address to bind")
    _add(parser, "--port", 4437, "port", type=int)
    _add_config(parser, "--data-dir", "local state: the WAL, and the Delta table unless --storage-uri")
    _add_config(
        parser, "--storage-uri", "where the Delta table lives, e.g. s3://bucket/prefix (default <data-dir>/delta)"
    )
    _add(
        parser,
        "--storage-option",
        [],
        "KEY=VALUE passed to delta-rs's object store, e.g. AWS_ENDPOINT_URL=http://127.0.0.1:9000 (repeatable)",
        action="append",
        metavar="KEY=VALUE",
    )
    _add_config(
        parser,
        "--durability",
        "acknowledge appends after the local WAL fsync (wal) or after the Delta commit (delta)",
        choices=list(get_args(Durability)),
    )
    _add_config(parser, "--node-id", "this server's name as the owner of its storage (default: kept in --data-dir)")
    _add_config(parser, "--advertise-url", "the URL this server is reached at, named to other servers and operators")
    _add_config(
        parser,
        "--take-over",
        "when another server owns the storage: refuse to start (no), ask it to hand over (ask, or the "
        "flag alone), or take it even if it does not answer (force); force also gives up, for this start, "
        "acknowledged records a write-ahead log holds that the start would leave behind (a WAL in --data-dir "
        "under --durability delta, or this node's WAL on a lost data dir)",
        nargs="?",
        const="ask",
        choices=list(get_args(TakeOver)),
    )
    _add_config(
        parser,
        "--take-over-timeout-s",
        "how long --take-over waits for the owner to hand over; 0: no wait (a delta owner's storage is "
        "then claimed at once, a wal owner's refused)",
    )
    _add(
        parser,
        "--cluster",
        False,
        "run as a cluster node: hold shard leases on --storage-uri (s3:// or a local path shared by all "
        "nodes), serve each held shard with a server of its own, answer any stream URL with a 307 to its "
        "shard's server; needs --storage-uri, and --advertise-url unless --host is a loopback or a name",
        action="store_true",
    )
    _add(parser, "--shards", 4, "cluster mode: the number of shards of a new storage root (fixed after)", type=int)
    _add(parser, "--lease-ttl-s", 5.0, "cluster mode: a dead node's shards are taken after this", type=float)
    _add(
        parser,
        "--cluster-secret-file",
        None,
        "cluster mode: the credential of the cluster's internal routes, one secret per line (the first is "
        "presented, every one accepted: rotation); default: a random one the first node stores in the root",
    )
    _add_config(parser, "--cluster-shard", "set by a cluster node for the shard servers it starts: k/N")
    _add_config(parser, "--cluster-router", "set by a cluster node for its shard servers: the node's URL")
    _add(parser, "--cluster-parent", 0, "set by a cluster node for its shard servers: the node's pid", type=int)
    _add_config(
        parser,
        "--cross-shard-fork-max-bytes",
        "cluster mode: a fork of another shard's stream copies what it inherits, at most this many bytes "
        "(larger: 409 FORK_TOO_LARGE; give fork and source one shard key to fork without a copy)",
    )
    _add_config(parser, "--long-poll-timeout-ms", "how long a long-poll waits for data")
    _add_config(parser, "--sse-reconnect-ms", "SSE connections are closed after this long")
    _add_config(parser, "--max-body-bytes", "larger request bodies get 413")
    _add_config(parser, "--max-read-bytes", "about how many bytes one read response carries")
    _add_config(parser, "--max-header-bytes", "a larger request line + headers gets 431; 0: no limit")
    _add_config(
        parser,
        "--request-timeout-s",
        "a request head must arrive within this (else the connection is closed), a body too (else 408)",
    )
    _add(parser, "--keep-alive-timeout-s", 5, "idle keep-alive connections are closed after this", type=int)
    _add(parser, "--max-connections", 0, "more concurrent connections get uvicorn's 503; 0: no limit", type=int)
    _add(
        parser,
        "--http-parser",
        "httptools",
        "the HTTP/1.1 parser: httptools (C) or h11 (pure Python, slower); both enforce the head limits",
        choices=list(get_args(HttpParser)),
    )
    _add_config(
        parser,
        "--fast-path",
        "on: a stream's small appends and creates, reads, long-polls and HEADs are answered from the "
        "connection's parser callbacks, with the app's answers (httptools); off: every request runs "
        "through uvicorn's request cycle and the ASGI app",
        choices=["on", "off"],
    )
    _add(
        parser,
        "--forwarded-allow-ips",
        None,
        "proxies (addresses, CIDR networks, or *) whose X-Forwarded-For / X-Forwarded-Proto name the client "
        "and scheme (rate limits, access log, Location); default uvicorn's: $FORWARDED_ALLOW_IPS, else "
        "127.0.0.1,::1",
    )
    _add(parser, "--event-loop", "uvloop", "the asyncio event loop: uvloop or asyncio", choices=["uvloop", "asyncio"])
    _add_config(
        parser, "--max-live-readers", "more concurrent (idle) long-polls + SSE streams get 503 + Retry-After; 0: none"
    )
    _add_config(parser, "--max-streams-per-bucket", "creating a stream in a full bucket gets 409; 0: no limit")
    _add_config(
        parser,
        "--idle-stream-s",
        "a stream unused this long (all in Delta, nobody waiting) goes back to sleep until used; 0: never",
    )
    _add_config(
        parser,
        "--tombstone-retention-s",
        "a deleted stream's final offset and incarnation are kept this long, for readers that find it gone; "
        "0: none kept (every deletion then looks like a loss to readers)",
    )
    _add_config(
        parser,
        "--rate-limit-rps",
        "requests/s per token (per client address without auth); more get 429 + Retry-After; 0: off",
    )
    _add_config(parser, "--rate-limit-burst", "requests a client may make at once; 0: one second's worth")
    _add_config(parser, "--flush-interval-ms", "WAL mode: how often the WAL is flushed into Delta")
    _add_config(
        parser,
        "--max-wal-bytes",
        "WAL mode: while the WAL holds more than this (Delta unreachable), writes get 503 + Retry-After",
    )
    _add_config(parser, "--tail-cache-bytes", "flushed bytes kept in memory per stream, at most")
    _add_config(
        parser,
        "--history-cache-bytes",
        "history read from Delta kept for a repeated read of the same place, all streams; 0: off",
    )
    _add_config(
        parser,
        "--memory-budget",
        "bytes of tail caches + history cache + in-flight reads together (least recently used let go first); "
        "a quarter of it bounds writes in flight (bodies wait, then 503 + Retry-After); 0: no limit",
    )
    _add_config(
        parser,
        "--memory-guard",
        "on: the caches hold less while other work needs memory, keeping RSS within --memory-budget of its "
        "size at start",
        choices=["on", "off"],
    )
    _add_config(parser, "--compaction-interval-s", "seconds between compaction passes; 0 turns it off")
    _add_config(
        parser, "--compaction-target-file-bytes", "compaction packs new small files into files of about this size"
    )
    _add_config(parser, "--vacuum-retention-hours", "unreferenced data files older than this are deleted")
    _add_config(
        parser,
        "--log-retention-hours",
        "the Delta log keeps its two newest checkpoints and the commits after them; this also keeps "
        "every entry younger than this (time travel), commits costing more as the window fills",
    )
    _add_config(
        parser,
        "--read-plan-ttl-s",
        "read plans' file URLs expire after this (at most the vacuum retention, which keeps planned files)",
    )
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
    _add_config(parser, "--webhook-retry-initial-ms", "first webhook retry delay; doubles per failure")
    _add_config(parser, "--webhook-retry-max-ms", "longest webhook retry delay")
    _add_config(parser, "--webhook-timeout-ms", "a webhook receiver must answer within this")
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


def load_auth_config(path: Path | None, env_text: str | None) -> AuthConfig | None:
    """Tokens from the file or from ``DURABLE_STREAMS_AUTH_TOKENS``; ``None`` when neither is set."""
    if path is not None and env_text is not None:
        raise AuthConfigError(f"tokens are configured twice: use --auth-tokens-file or {TOKENS_ENV}, not both")
    if path is not None:
        try:
            return parse_tokens(path.read_text(encoding="utf-8"), f"--auth-tokens-file {path}")
        except (OSError, UnicodeDecodeError) as exc:
            raise AuthConfigError(f"cannot read --auth-tokens-file {path}: {exc}") from None
    return parse_tokens(env_text, TOKENS_ENV) if env_text is not None else None


_CONFIG_FIELDS = [
    field.name
    for field in dataclasses.fields(ServerConfig)
    if field.name not in ("storage_options", "auth", "cluster_secret")
]
"""The fields set by the option of the same name."""


def _as_option(error: ConfigError) -> SystemExit:
    return SystemExit(f"--{error.field.replace('_', '-')} {error.problem}")


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The server's configuration; ``SystemExit`` naming the option if an option is unusable.

    Also checks the options that only the CLI's uvicorn uses (port, connections).
    """
    try:
        require_number("port", args.port, positive=True)
        require_number("keep_alive_timeout_s", args.keep_alive_timeout_s, positive=True)
        require_number("max_connections", args.max_connections, positive=False)
    except ConfigError as exc:
        raise _as_option(exc) from None
    options: dict[str, str] = {}
    for item in args.storage_option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--storage-option expects KEY=VALUE, got {item!r}")
        options[key.strip()] = value
    try:
        auth = load_auth_config(args.auth_tokens_file, os.environ.get(TOKENS_ENV))
    except AuthConfigError as exc:
        raise SystemExit(str(exc)) from None
    fields = {name: getattr(args, name) for name in _CONFIG_FIELDS}
    try:
        secret = os.environ.get(CLUSTER_SECRET_ENV) if args.cluster_shard else None  # (its node's: ``cluster.secret``)
        return ServerConfig(storage_options=options, auth=auth, cluster_secret=secret, **fields)
    except ConfigError as exc:
        raise _as_option(exc) from None


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


def _freeze_start_up() -> None:
    """The app has started: what start-up built lives as long as the process (``collector.py``)."""
    logging.getLogger("durable_streams_server").info("started", extra={"frozen_objects": freeze_start_up_objects()})


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    if args.cluster:
        from .cluster.run import run_node

        run_node(args, list(sys.argv[1:] if argv is None else argv), config_from_args(args))
        return
    if args.cluster_parent:
        die_with_parent(args.cluster_parent)
    config = config_from_args(args)
    check_exposure(args.host, config, args.allow_unauthenticated)
    check_tls(args.tls_certfile, args.tls_keyfile)
    auth = config.auth
    allocators = tune_allocators()
    logging.getLogger("durable_streams_server").info(
        "starting",
        extra={
            **allocators,
            "host": args.host,
            "port": args.port,
            "data_dir": str(config.data_dir),
            "auth": ",".join(grant.name for grant in auth.grants) if auth is not None else "off",
            "tls": args.tls_certfile is not None,
        },
    )
    app = build_app(config, on_started=_freeze_start_up)
    uvicorn.run(
        app.asgi,
        host=args.host,
        port=args.port,
        log_config=None,
        access_log=args.access_log,
        timeout_graceful_shutdown=5,
        http=http_protocol(app, config, args.http_parser),
        h11_max_incomplete_event_size=config.max_header_bytes or None,
        loop=args.event_loop,
        forwarded_allow_ips=args.forwarded_allow_ips,
        timeout_keep_alive=args.keep_alive_timeout_s,
        # uvicorn counts the connection asking, so its limit is one above the connections served
        limit_concurrency=args.max_connections + 1 if args.max_connections else None,
        ssl_certfile=args.tls_certfile,
        ssl_keyfile=args.tls_keyfile,
    )


if __name__ == "__main__":
    main()
