"""The durability mode is one enum from the flag down to the owner and lease records it is written in."""

from __future__ import annotations

import pytest

from durable_streams_server.cluster.node.leases import LeaseFormatError, LeaseRecord
from durable_streams_server.config import ConfigError, ServerConfig
from durable_streams_server.storage.durability import Durability
from durable_streams_server.storage.ownership import Owner


def test_a_flags_string_becomes_the_enum_and_a_bad_one_names_the_setting() -> None:
    assert ServerConfig(durability="delta").durability is Durability.DELTA  # type: ignore[arg-type]
    assert ServerConfig().durability is Durability.WAL
    with pytest.raises(ConfigError, match=r"durability must be one of wal, delta, got 'disk'"):
        ServerConfig(durability="disk")  # type: ignore[arg-type]


def test_records_read_back_hold_the_enum_and_an_unknown_mode_counts_as_wal() -> None:
    owner = Owner("n0", 3, "http://x", "/data", "host", 12, Durability.DELTA)
    assert Owner.from_json(owner.to_json()) == owner
    assert Owner.from_json(owner.to_json()).durability is Durability.DELTA  # type: ignore[union-attr]
    newer = owner.to_json().replace('"durability":"delta"', '"durability":"raft"')
    assert Owner.from_json(newer).durability is Durability.WAL  # type: ignore[union-attr]

    lease = LeaseRecord(shard=1, holder="n0", state="serving", durability=Durability.WAL, ttl_ms=5000)
    assert LeaseRecord.from_bytes(lease.to_bytes()).durability is Durability.WAL
    assert LeaseRecord.from_bytes(lease.to_bytes().replace(b'"wal"', b'"raft"')).durability is Durability.WAL
    with pytest.raises(LeaseFormatError):
        LeaseRecord.from_bytes(b'{"shard": 1, "bogus": true}')
