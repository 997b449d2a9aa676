"""The server's configuration: one frozen value, built by the CLI or by an embedding app."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

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
    flush_interval_ms: int = 1_000
    tail_cache_bytes: int = 4 * 1024 * 1024
    compaction_interval_s: float = 600.0
    """Seconds between background compaction passes; 0 turns compaction off."""
    vacuum_retention_hours: int = 1

    @property
    def resolved_storage_uri(self) -> str:
        if self.storage_uri:
            return self.storage_uri
        return str((self.data_dir / "delta").resolve())
