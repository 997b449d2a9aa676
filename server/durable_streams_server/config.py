"""The server's configuration: one frozen value, built by the CLI or by an embedding app."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .http.auth import AuthConfig
from .storage.committer import Durability


@dataclass(frozen=True)
class ServerConfig:
    data_dir: Path = Path("data")
    storage_uri: str | None = None
    """Where the Delta table lives; ``None`` means ``<data_dir>/delta`` (the embedded default)."""
    storage_options: Mapping[str, str] = field(default_factory=dict)
    durability: Durability = "wal"
    long_poll_timeout_ms: int = 30_000
    sse_reconnect_ms: int = 60_000
    max_body_bytes: int = 64 * 1024 * 1024
    max_read_bytes: int = 1024 * 1024
    max_header_bytes: int = 16 * 1024
    """Request line + headers; larger requests get 431. 0: no limit."""
    request_timeout_s: float = 30.0
    """A request body must arrive within this (else 408); the CLI's server holds heads to it too."""
    max_live_readers: int = 0
    """Concurrent long-poll waits + SSE streams; more get 503. 0: no limit."""
    max_streams_per_bucket: int = 0
    """Creating a stream in a full bucket gets 409. 0: no limit."""
    rate_limit_rps: float = 0.0
    """Requests per second per token (or client address without auth); more get 429. 0: off."""
    rate_limit_burst: int = 0
    """How many requests a client may make at once; 0: one second's worth (at least 1)."""
    flush_interval_ms: int = 1_000
    max_wal_bytes: int = 1024**3
    """WAL mode: writes get 503 while the WAL (waiting for Delta) holds more than this."""
    tail_cache_bytes: int = 4 * 1024 * 1024
    history_cache_bytes: int = 64 * 1024 * 1024
    compaction_interval_s: float = 600.0
    """Seconds between background compaction passes; 0 turns compaction off."""
    vacuum_retention_hours: int = 1
    allow_private_webhook_urls: tuple[str, ...] = ()
    """Networks (CIDR) webhook targets may be in although private/loopback/link-local."""
    webhook_retry_initial_ms: int = 1_000
    webhook_retry_max_ms: int = 60_000
    webhook_timeout_ms: int = 10_000
    auth: AuthConfig | None = None
    """Bearer tokens and what each may do; ``None`` serves every request without a token."""

    @property
    def resolved_storage_uri(self) -> str:
        if self.storage_uri:
            return self.storage_uri
        return str((self.data_dir / "delta").resolve())
