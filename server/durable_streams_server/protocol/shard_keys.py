"""The stable hash that maps a shard key to one of a cluster's shards (pure).

BLAKE2b, not Python's ``hash`` (salted per process): every node and every shard server
must map a key to the same shard.
"""

from __future__ import annotations

import hashlib


def shard_of_key(key: str, shards: int) -> int:
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards
