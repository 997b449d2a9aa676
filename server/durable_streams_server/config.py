"""The server's configuration: one frozen value, built by the CLI or by an embedding app.

Constructing a ``ServerConfig`` checks it (``__post_init__``): every numeric option is a
number in its range and ``durability`` is a known mode, else ``ConfigError`` names the
field. An app mounted by an embedder therefore gets the same checks as the command line,
which takes its defaults from these fields and reports a ``ConfigError`` as its option.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from .protocol.tokens import AuthConfig
from .protocol.webhook_rules import parse_networks
from .storage.durability import Durability
from .storage.ownership import TakeOver

_NODE_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class ConfigError(ValueError):
    """An option out of its range; ``field`` names it, ``problem`` says what is wrong."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem


def parse_shard(spec: str) -> tuple[int, int]:
    """``k/N`` (``cluster_shard``): shard ``k`` of ``N``; ``ValueError`` if malformed."""
    shard_text, _, count_text = spec.partition("/")
    shard, shards = int(shard_text), int(count_text)
    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard} is outside 0..{shards - 1}")
    return shard, shards


def require_number(name: str, value: object, *, positive: bool) -> None:
    """``value`` is an int or float, greater than 0 if ``positive``, else 0 or more."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(name, f"must be a number, got {value!r}")
    if positive and value <= 0:
        raise ConfigError(name, f"must be greater than 0, got {value}")
    if value < 0:
        raise ConfigError(name, f"must be 0 or more, got {value}")


# Options whose zero would mean "nothing works" (every request times out, every body is too
# large …) must be positive; the others may be 0, which documents "off" or "none".
_POSITIVE = (
    "cross_shard_fork_max_bytes",
    "long_poll_timeout_ms",
    "sse_reconnect_ms",
    "max_body_bytes",
    "max_read_bytes",
    "request_timeout_s",
    "flush_interval_ms",
    "max_wal_bytes",
    "webhook_retry_initial_ms",
    "webhook_retry_max_ms",
    "webhook_timeout_ms",
    "compaction_target_file_bytes",
    "read_plan_ttl_s",
)
_NON_NEGATIVE = (
    "take_over_timeout_s",
    "max_header_bytes",
    "max_live_readers",
    "max_streams_per_bucket",
    "idle_stream_s",
    "tombstone_retention_s",
    "retention_max_age_s",
    "retention_max_bytes",
    "retention_max_messages",
    "rate_limit_rps",
    "rate_limit_burst",
    "tail_cache_bytes",
    "history_cache_bytes",
    "memory_budget",
    "compaction_interval_s",
    "vacuum_retention_hours",
    "log_retention_hours",
)


@dataclass(frozen=True)
class ServerConfig:
    data_dir: Path = Path("data")
    storage_uri: str | None = None
    """Where the Delta table lives; ``None`` means ``<data_dir>/delta`` (the embedded default)."""
    storage_options: Mapping[str, str] = field(default_factory=dict)
    durability: Durability = Durability.WAL
    long_poll_timeout_ms: int = 30_000
    sse_reconnect_ms: int = 60_000
    max_body_bytes: int = 64 * 1024 * 1024
    max_read_bytes: int = 1024 * 1024
    max_header_bytes: int = 16 * 1024
    """Request line + headers; larger requests get 431. 0: no limit."""
    request_timeout_s: float = 30.0
    """A request body must arrive within this (else 408); the CLI's server holds heads to it too."""
    max_live_readers: int = 1_000
    """Concurrent long-poll waits + SSE streams (idle, each holds a connection, a file
    descriptor and ~20 KiB); more get 503. 0: no limit."""
    max_streams_per_bucket: int = 0
    """Creating a stream in a full bucket gets 409. 0: no limit."""
    idle_stream_s: int = 300
    """A stream unused this long, all in Delta and waited on by nobody, goes back to sleep:
    its state kept as bytes until it is used again (``engine.idle``). 0: never."""
    tombstone_retention_s: int = 7 * 24 * 3600
    """A deleted stream's final offset and incarnation are kept this long (at most 100,000 of
    them: ``engine.tombstones``), so a reader finding it gone can tell whether it missed any."""
    retention_max_age_s: int = 0
    """A new stream's retention limit of age, unless it or its bucket names one (``protocol.retention``). 0: none."""
    retention_max_bytes: int = 0
    """A new stream's retention limit of bytes, unless it or its bucket names one. 0: none."""
    retention_max_messages: int = 0
    """A new stream's retention limit of messages, unless it or its bucket names one. 0: none."""
    rate_limit_rps: float = 0.0
    """Requests per second per token (or client address without auth); more get 429. 0: off."""
    rate_limit_burst: int = 0
    """How many requests a client may make at once; 0: one second's worth (at least 1)."""
    flush_interval_ms: int = 1_000
    max_wal_bytes: int = 1024**3
    """WAL mode: writes get 503 while the WAL (waiting for Delta) holds more than this."""
    tail_cache_bytes: int = 4 * 1024 * 1024
    """Flushed bytes kept in memory per stream, at most (the memory budget may keep fewer)."""
    history_cache_bytes: int = 64 * 1024 * 1024
    memory_budget: int = 512 * 1024 * 1024
    """Bytes of tail caches + history cache + in-flight reads together, least recently used
    let go first; an eighth of it bounds history reads parked between responses, a quarter
    the bytes of writes in flight (``engine.memory_writes``). 0: no limit."""
    memory_guard: Literal["on", "off"] = "on"
    """on: the caches hold less while other work needs memory, so RSS stays within
    ``memory_budget`` of the size at start (``engine.memory_guard``)."""
    compaction_interval_s: float = 600.0
    """Seconds between background compaction passes; 0 turns compaction off."""
    compaction_target_file_bytes: int = 128 * 1024 * 1024
    """Compaction packs the files written since its last pass into files of about this size."""
    vacuum_retention_hours: int = 1
    """Data files compaction replaced are deleted this long after (readers' plans stay valid)."""
    log_retention_hours: int = 0
    """Delta log entries older than this are deleted (``delta.logRetentionDuration``)."""
    read_plan_ttl_s: int = 600
    """File URLs of a read plan (direct history reads) expire after this; at most the vacuum
    retention, so a file a plan names is there until its URL expires."""
    allow_private_webhook_urls: tuple[str, ...] = ()
    """Networks (CIDR) webhook targets may be in although private/loopback/link-local
    (entries may also be comma-separated lists); by default only public addresses."""
    webhook_retry_initial_ms: int = 1_000
    """First webhook retry delay; it doubles per failed attempt up to ``webhook_retry_max_ms``."""
    webhook_retry_max_ms: int = 60_000
    webhook_timeout_ms: int = 10_000
    """A webhook receiver must answer within this."""
    auth: AuthConfig | None = None
    """Bearer tokens and what each may do; ``None`` serves every request without a token."""
    node_id: str | None = None
    """This server's name as an owner of its storage (``storage.ownership``); ``None``: the id
    kept in ``data_dir`` (made at the first start), so a restart is the same node."""
    advertise_url: str | None = None
    """The URL other servers and operators reach this one at (named in ownership errors)."""
    take_over: TakeOver = "no"
    """When another node owns the storage: no (refuse to start, naming it), ask (it hands over:
    flushes what it acknowledged, then lets go) or force (take it even if it does not answer)."""
    take_over_timeout_s: float = 30.0
    """How long ``take_over="ask"`` waits for the owner's release. 0: no wait (the owner is
    known to be gone): a ``--durability delta`` owner's location is claimed at once, a WAL
    owner's refused, as after any timeout."""
    cluster_shard: str | None = None
    """On a cluster's shard server (started by its node: ``cluster.node.workers``): ``k/N``, the
    shard it serves of N; a request for another shard's stream is sent to ``cluster_router``
    (``cluster.shard.guard``)."""
    cluster_router: str | None = None
    """The advertised URL of the node that started this shard server (its router)."""
    cluster_secret: str | None = field(default=None, repr=False)  # (never in a repr or a log)
    """The cluster-internal credential the node handed to this shard server with its settings
    (``cluster.node.workers``; ``cluster.shard.credential``), never on a command line."""
    cross_shard_fork_max_bytes: int = 256 * 1024 * 1024
    """In a cluster: the most message bytes a fork of another shard's stream copies
    (``cluster.shard.fork_copies``); a larger fork is refused (409 ``FORK_TOO_LARGE``)."""
    fast_path: Literal["on", "off"] = "on"
    """on: where the server's own connection protocol serves the app (``server.http_protocol``:
    the command line's uvicorn, httptools parser), a stream's small appends and creates, reads,
    long-polls and HEADs are answered from the connection's parser callbacks, with the app's
    answers (``http/fastpath/``); off: every request runs through uvicorn's request cycle and
    the ASGI app. The head guards apply either way. An app mounted elsewhere runs without it."""

    def __post_init__(self) -> None:
        for name in _POSITIVE:
            require_number(name, getattr(self, name), positive=True)
        for name in _NON_NEGATIVE:
            require_number(name, getattr(self, name), positive=False)
        if self.webhook_retry_max_ms < self.webhook_retry_initial_ms:
            raise ConfigError(
                "webhook_retry_max_ms",
                f"must be at least webhook_retry_initial_ms ({self.webhook_retry_initial_ms}), "
                f"got {self.webhook_retry_max_ms}",
            )
        allowed: object = self.allow_private_webhook_urls
        networks = (allowed,) if isinstance(allowed, str) else tuple(self.allow_private_webhook_urls)
        object.__setattr__(self, "allow_private_webhook_urls", networks)  # (the CLI passes a list)
        try:
            parse_networks(networks)
        except ValueError as exc:
            raise ConfigError("allow_private_webhook_urls", str(exc)) from None
        if self.vacuum_retention_hours and self.read_plan_ttl_s > self.vacuum_retention_hours * 3600:
            raise ConfigError(
                "read_plan_ttl_s",
                f"must be at most vacuum_retention_hours ({self.vacuum_retention_hours} h), got {self.read_plan_ttl_s}",
            )
        for switch in ("memory_guard", "fast_path"):
            if getattr(self, switch) not in ("on", "off"):
                raise ConfigError(switch, f"must be on or off, got {getattr(self, switch)!r}")
        if self.take_over not in get_args(TakeOver):
            raise ConfigError("take_over", f"must be one of {', '.join(get_args(TakeOver))}, got {self.take_over!r}")
        if self.node_id is not None and not _NODE_ID.fullmatch(self.node_id):
            raise ConfigError("node_id", f"must be 1-64 letters, digits, '.', '_' or '-', got {self.node_id!r}")
        if (self.cluster_shard is None) != (self.cluster_router is None):
            raise ConfigError("cluster_shard", "a shard server needs both cluster_shard and cluster_router")
        if self.cluster_shard is not None:
            try:
                parse_shard(self.cluster_shard)
            except ValueError as exc:
                raise ConfigError(
                    "cluster_shard", f"must be k/N with 0 <= k < N, got {self.cluster_shard!r}: {exc}"
                ) from None
        if self.durability not in list(Durability):
            modes = ", ".join(Durability)
            raise ConfigError("durability", f"must be one of {modes}, got {self.durability!r}")
        object.__setattr__(self, "durability", Durability(self.durability))  # (a flag's or a file's string)

    @property
    def resolved_storage_uri(self) -> str:
        if self.storage_uri:
            return self.storage_uri
        return str((self.data_dir / "delta").resolve())
