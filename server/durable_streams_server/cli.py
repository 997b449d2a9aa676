"""``durable-streams-server``: build the app from options (or environment) and run uvicorn."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, cast, get_args

from .config import ServerConfig
from .config_file import ConfigFileError, read_config_file
from .config_show import render
from .durations import Duration, flag_unit
from .http.fastpath import HttpParser
from .log_format import configure_logging
from .serve import serve
from .settings import NO_SOURCES, TOKENS_ENV, Settings, Sources, settings_from_args
from .settings_json import SettingsFormatError, settings_from_json
from .storage.durability import Durability
from .storage.ownership import TakeOver

ENV_PREFIX = "DURABLE_STREAMS_"
__all__ = ["build_parser", "config_from_args", "load_settings", "main", "show_config"]
DEFAULTS = ServerConfig()
"""The CLI's defaults for the options that configure the server are the config's."""


def _env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


def _add(parser: argparse.ArgumentParser, flag: str, default: object, help: str, **kwargs: object) -> None:
    """An option whose default comes from ``DURABLE_STREAMS_<FLAG>`` when that is set."""
    raw = os.environ.get(_env_name(flag))
    unit = flag_unit(flag)
    if unit is not None and kwargs.get("type") in (int, float):  # durations: 30000, or 30s (``durations``)
        kwargs.update(type=Duration(unit, kwargs["type"]), metavar="DURATION")  # type: ignore[arg-type]
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
        except (ValueError, argparse.ArgumentTypeError) as exc:
            reason = f": {exc}" if isinstance(exc, argparse.ArgumentTypeError) else ""
            raise SystemExit(f"{_env_name(flag)}={raw!r} is not valid for {flag}{reason}") from None
    shown = f" (default {default})" if default is not None and default is not False and default != [] else ""
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
        "(e.g. DURABLE_STREAMS_PORT=8080, DURABLE_STREAMS_STORAGE_OPTION='k1=v1,k2=v2'), or in a TOML file "
        "(--config) under its name without the dashes; a flag wins over its variable, which wins over the file. "
        "An option named in a unit (-ms, -s, -hours) takes a number in that unit or a duration with one "
        "(500ms, 5s, 7d). 'durable-streams-server config show [--config FILE] [options]' prints the effective "
        "settings, secrets masked.",
        allow_abbrev=False,  # (an option is named whole: a prefix never stands for another option)
    )
    _add(
        parser,
        "--config",
        None,
        "a TOML file of settings, each under its flag's name without the dashes (max-body-bytes = 1048576, "
        'long-poll-timeout-ms = "30s", [storage-option] for the object store\'s keys); flags and '
        f"{ENV_PREFIX}* variables override it",
        type=Path,
        metavar="FILE",
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
        choices=[mode.value for mode in Durability],
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
    _add_config(
        parser,
        "--cluster-shard",
        "a shard server's shard, k/N (a node hands this to the shard servers it starts with their settings, "
        "on stdin; the flag serves a shard server started by hand)",
    )
    _add_config(parser, "--cluster-router", "a shard server's node: the node's URL (as --cluster-shard)")
    _add(parser, "--cluster-parent", 0, "a shard server's node: its pid, to die with it (as --cluster-shard)", type=int)
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
    for flag, what in (
        ("--retention-max-age-s", "appended longer ago than this"),
        ("--retention-max-bytes", "older than the newest this many bytes"),
        ("--retention-max-messages", "older than the newest this many"),
    ):
        _add_config(
            parser,
            flag,
            f"a new stream's retention limit unless its PUT or its bucket names one: messages {what} are removed "
            "by maintenance passes (--compaction-interval-s); 0: none",
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


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The server's part of ``settings_from_args`` (which also checks the listening options)."""
    return settings_from_args(args).server


def _given_flags(parser: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The destinations ``argv`` sets; a repeatable option's entries add to the file's instead."""
    given = set()
    for token in argv:
        if token == "--":
            break
        action = parser._option_string_actions.get(token.split("=", 1)[0])
        if action is not None and not isinstance(action, argparse._AppendAction):
            given.add(action.dest)
    return given


def parse_command_line(argv: Sequence[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace, Sources]:
    """The parsed options with the ``--config`` file beneath them: a flag wins over its
    ``DURABLE_STREAMS_*`` variable, which wins over the file, which wins over the default; a
    repeatable option's flags and variable add to the file's entries. Also where the file set
    what it set (not a repeatable option the variable adds to)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.config is None:
        return parser, args, NO_SOURCES
    try:
        found = read_config_file(args.config, parser)
    except ConfigFileError as exc:
        raise SystemExit(str(exc)) from None
    in_environment = {
        action.dest
        for action in parser._actions
        if action.option_strings and _env_name(action.option_strings[-1]) in os.environ
    }
    repeatable = {action.dest for action in parser._actions if isinstance(action, argparse._AppendAction)}
    overridden = _given_flags(parser, argv) | (in_environment - repeatable)
    kept = {dest: setting for dest, setting in found.items() if dest not in overridden}
    defaults = {dest: setting.value for dest, setting in kept.items()}
    for dest in repeatable & in_environment & defaults.keys():  # (the variable's entries after the file's)
        from_file, from_variable = cast(list[str], defaults[dest]), cast(list[str], parser.get_default(dest))
        defaults[dest] = [*from_file, *from_variable]
    parser.set_defaults(**defaults)
    sources = {dest: f"{args.config}:{kept[dest].line}" for dest in kept.keys() - (repeatable & in_environment)}
    return parser, parser.parse_args(argv), sources


def load_settings(argv: Sequence[str]) -> Settings:
    """The process's settings from its command line, environment and configuration file."""
    _, args, sources = parse_command_line(argv)
    return settings_from_args(args, sources)


def show_config(argv: Sequence[str]) -> str:
    """``config show``: the effective settings as a configuration file, secrets masked."""
    parser, args, sources = parse_command_line(argv)
    return render(parser, args, settings_from_args(args, sources))


def run_shard_server(stdin: BinaryIO) -> None:
    """A cluster's shard server: everything is imported first (``serve``, and with it the server
    and its shard server's parts: ``cluster.shard``), then it waits for its settings,
    which its node writes to ``stdin`` as JSON (``settings_json``); so a process may be started
    before its shard is known."""
    data = stdin.read()
    if not data:
        raise SystemExit("shard-server: no settings on stdin (its node ended before sending them)")
    try:
        settings = settings_from_json(data)
    except SettingsFormatError as exc:
        raise SystemExit(f"shard-server: {exc}") from None
    configure_logging(settings.logs.level, settings.logs.format)
    serve(settings)


USAGE = (
    "durable-streams-server [--config FILE] [options]: serve\n"
    "durable-streams-server config show [--config FILE] [options]: print the effective settings, secrets masked\n"
    "durable-streams-server shard-server: a cluster's shard server, its settings read from stdin (started by its node)"
)


def main(argv: Sequence[str] | None = None) -> None:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["shard-server"]:
        run_shard_server(sys.stdin.buffer)
        return
    if arguments[:1] == ["config"]:
        command = arguments[1:2]
        if command in (["-h"], ["--help"]):
            sys.stdout.write(f"usage:\n{USAGE}\n")
            return
        if command != ["show"]:
            what = f"unknown command {command[0]!r}" if command else "a command is needed (show)"
            raise SystemExit(f"durable-streams-server config: {what}\nusage:\n{USAGE}")
        sys.stdout.write(show_config(arguments[2:]))
        return
    settings = load_settings(arguments)
    configure_logging(settings.logs.level, settings.logs.format)
    if settings.cluster is not None:
        from .cluster.node.run import run_node

        run_node(settings)
        return
    serve(settings)


if __name__ == "__main__":
    main()
