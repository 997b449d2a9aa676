"""A process's settings, typed: parsed once from the command line, then only these flow.

``settings_from_args`` is the one reader of the CLI's argparse namespace: it checks every value
(``ServerConfig`` checks its own, ``Listen`` and ``NodeOptions`` theirs) and builds a frozen
``Settings``; ``serve``, ``cluster.node.run`` and a cluster's shard servers take that, never a raw
field. A value out of range is reported as its source gave it: ``--flag …`` for a flag or its
environment variable, ``<file>:<line>: key …`` for the configuration file (``config_file``).

A cluster node hands each shard server its ``Settings`` as data (``settings_json``), so what a
shard server runs with is what the node was given, with the shard's own parts replaced.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Literal, get_args

from .config import ConfigError, ServerConfig, require_number
from .http.fastpath import HttpParser
from .protocol.tokens import AuthConfig, AuthConfigError, parse_tokens

TOKENS_ENV = "DURABLE_STREAMS_AUTH_TOKENS"
CLUSTER_SECRET_ENV = "DURABLE_STREAMS_CLUSTER_SECRET"
"""A shard server started by hand: the cluster's credential (``cluster.shard.credential``); a
node hands its shard servers theirs with their settings."""
EventLoop = Literal["uvloop", "asyncio"]
LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["logfmt", "json"]
Sources = Mapping[str, str]
"""Where a setting given by the configuration file is: destination → ``<file>:<line>``."""
NO_SOURCES: Sources = MappingProxyType({})


def _require_choice(name: str, value: object, kind: object) -> None:
    choices = get_args(kind)
    if value not in choices:
        raise ConfigError(name, f"must be one of {', '.join(choices)}, got {value!r}")


@dataclass(frozen=True)
class Listen:
    """How the process serves HTTP: what uvicorn is given (``serve.run_uvicorn``)."""

    host: str
    port: int
    keep_alive_timeout_s: int
    max_connections: int
    """More concurrent connections get uvicorn's 503; 0: no limit."""
    http_parser: HttpParser
    forwarded_allow_ips: str | None
    event_loop: EventLoop
    tls_certfile: str | None
    tls_keyfile: str | None
    access_log: bool

    def __post_init__(self) -> None:
        require_number("port", self.port, positive=True)
        if self.port > 65535:  # (uvicorn would bind the number modulo 65,536: another port)
            raise ConfigError("port", f"must be at most 65535, got {self.port}")
        require_number("keep_alive_timeout_s", self.keep_alive_timeout_s, positive=True)
        require_number("max_connections", self.max_connections, positive=False)
        _require_choice("http_parser", self.http_parser, HttpParser)
        _require_choice("event_loop", self.event_loop, EventLoop)


@dataclass(frozen=True)
class Logs:
    """What the process logs (``log_format.configure_logging``)."""

    level: LogLevel
    format: LogFormat

    def __post_init__(self) -> None:
        for name, value, kind in (("log_level", self.level, LogLevel), ("log_format", self.format, LogFormat)):
            _require_choice(name, value, kind)


@dataclass(frozen=True)
class NodeOptions:
    """What only a cluster node (``--cluster``) uses; its shard servers run without them."""

    shards: int
    """The number of shards of a new storage root."""
    lease_ttl_s: float
    cluster_secret_file: Path | None

    def __post_init__(self) -> None:
        require_number("shards", self.shards, positive=True)
        require_number("lease_ttl_s", self.lease_ttl_s, positive=True)


@dataclass(frozen=True)
class Settings:
    """Everything one ``durable-streams-server`` process runs with."""

    server: ServerConfig
    listen: Listen
    logs: Logs
    cluster: NodeOptions | None
    """Set on a cluster node; ``None`` on a single server and on a shard server."""
    allow_unauthenticated: bool
    cluster_parent: int
    """On a shard server: its node's pid (it dies with the node); 0 otherwise."""


_SERVER_FIELDS = [
    field.name
    for field in dataclasses.fields(ServerConfig)
    if field.name not in ("storage_options", "auth", "cluster_secret")
]
"""The ``ServerConfig`` fields set by the option of the same name."""


def as_option(error: ConfigError, sources: Sources) -> SystemExit:
    """``error`` said as its value was given: the file's key and line, else the flag."""
    key = error.field.replace("_", "-")
    where = sources.get(error.field)
    return SystemExit(f"{where}: {key} {error.problem}" if where else f"--{key} {error.problem}")


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


def storage_options(items: list[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--storage-option expects KEY=VALUE, got {item!r}")
        options[key.strip()] = value
    return options


def server_config(args: argparse.Namespace, sources: Sources = NO_SOURCES) -> ServerConfig:
    """The ``ServerConfig`` part of ``settings_from_args``."""
    options = storage_options(args.storage_option)
    try:
        auth = load_auth_config(args.auth_tokens_file, os.environ.get(TOKENS_ENV))
    except AuthConfigError as exc:  # (the file's line too when the file named the tokens' file)
        where = sources.get("auth_tokens_file")
        raise SystemExit(f"{where}: {exc}" if where else str(exc)) from None
    fields = {name: getattr(args, name) for name in _SERVER_FIELDS}
    secret = os.environ.get(CLUSTER_SECRET_ENV) if args.cluster_shard else None  # (a hand-run shard server's)
    try:
        return ServerConfig(storage_options=options, auth=auth, cluster_secret=secret, **fields)
    except ConfigError as exc:
        raise as_option(exc, sources) from None


def settings_from_args(args: argparse.Namespace, sources: Sources = NO_SOURCES) -> Settings:
    """The process's settings from the parsed command line; ``SystemExit`` naming the option (or
    the file's key and line) if one is unusable."""
    try:
        listen = Listen(
            host=args.host,
            port=args.port,
            keep_alive_timeout_s=args.keep_alive_timeout_s,
            max_connections=args.max_connections,
            http_parser=args.http_parser,
            forwarded_allow_ips=args.forwarded_allow_ips,
            event_loop=args.event_loop,
            tls_certfile=args.tls_certfile,
            tls_keyfile=args.tls_keyfile,
            access_log=args.access_log,
        )
        logs = Logs(args.log_level, args.log_format)
        secret_file = Path(args.cluster_secret_file) if args.cluster_secret_file else None
        node = NodeOptions(args.shards, args.lease_ttl_s, secret_file) if args.cluster else None
    except ConfigError as exc:
        raise as_option(exc, sources) from None
    server = server_config(args, sources)
    return Settings(server, listen, logs, node, args.allow_unauthenticated, args.cluster_parent)
