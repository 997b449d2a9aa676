"""Buckets (extensions spec section 1): explicit namespaces for streams, and their listing.

Each bucket keeps the bucket-local ids of its streams in a sorted list, so a listing page
is a binary search plus ``limit`` steps — never a scan of the bucket — and stays cheap
for buckets with hundreds of thousands of streams.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..protocol.errors import Conflict, NotFound
from ..protocol.ids import BASE_SURFACE_PREFIX


def bucket_of(stream_name: str) -> tuple[str, str] | None:
    """``(bucket_id, stream_id)`` of a bucketed stream key; ``None`` on the base surface."""
    if stream_name.startswith(BASE_SURFACE_PREFIX):
        return None
    bucket_id, _, stream_id = stream_name.partition("/")
    return bucket_id, stream_id


@dataclass(slots=True)
class Bucket:
    bucket_id: str
    uid: int
    created_ms: int
    stream_ids: list[str] = field(default_factory=list)
    retention: dict[str, int | None] = field(default_factory=dict)
    """The retention limits its new streams get unless they name their own (``None``: no limit)."""

    def to_state(self, *, written_ms: int, deleted: bool = False) -> dict[str, Any]:
        return {
            "type": "bucket",
            "name": self.bucket_id,
            "uid": self.uid,
            "created_ms": self.created_ms,
            **({"retention": self.retention} if self.retention else {}),
            "tail": 0,
            "deleted": deleted,
            "written_ms": written_ms,
        }

    def page(self, prefix: str, after: str | None, limit: int) -> tuple[list[str], bool]:
        """Up to ``limit`` ids starting with ``prefix``, strictly after ``after``; and whether
        more follow."""
        ids = self.stream_ids
        start = bisect.bisect_left(ids, prefix)
        if after is not None:
            start = max(start, bisect.bisect_right(ids, after))
        found: list[str] = []
        index = start
        while index < len(ids) and ids[index].startswith(prefix):
            if len(found) == limit:
                return found, True
            found.append(ids[index])
            index += 1
        return found, False


class Buckets:
    """The registry of buckets; mutated only through the engine's records."""

    def __init__(self) -> None:
        self.by_id: dict[str, Bucket] = {}
        self.by_uid: dict[int, Bucket] = {}

    def load(self, state: dict[str, Any]) -> None:
        self.add(Bucket(state["name"], state["uid"], state["created_ms"], retention=state.get("retention") or {}))

    def add(self, bucket: Bucket) -> None:
        self.by_id[bucket.bucket_id] = bucket
        self.by_uid[bucket.uid] = bucket

    def remove(self, bucket: Bucket) -> None:
        del self.by_id[bucket.bucket_id]
        del self.by_uid[bucket.uid]

    def get(self, bucket_id: str) -> Bucket:
        bucket = self.by_id.get(bucket_id)
        if bucket is None:
            raise NotFound(f"bucket {bucket_id!r} not found", code="BUCKET_NOT_FOUND")
        return bucket

    def require_absent(self, bucket_id: str) -> None:
        if bucket_id in self.by_id:
            raise Conflict(f"bucket {bucket_id!r} already exists", code="BUCKET_EXISTS")

    def require_empty(self, bucket: Bucket) -> None:
        if bucket.stream_ids:
            raise Conflict(
                f"bucket {bucket.bucket_id!r} still holds {len(bucket.stream_ids)} stream(s)", code="BUCKET_NOT_EMPTY"
            )

    def require_room(self, bucket: Bucket, cap: int) -> None:
        """409 rather than 507 or 429: the bucket's state refuses the create, and deleting a
        stream resolves it (a 5xx would read as a server fault, a 429 as "retry later")."""
        if cap and len(bucket.stream_ids) >= cap:
            raise Conflict(
                f"bucket {bucket.bucket_id!r} already holds its maximum of {cap} streams", code="BUCKET_FULL"
            )

    def index_streams(self, names: pa.ChunkedArray) -> None:
        """Add many streams at once (recovery): split and sorted as Arrow columns, so
        rebuilding the index of 300,000 streams costs a sort, not a Python step per stream
        (string order of UTF-8 bytes is Python's order of code points)."""
        if not self.by_id:
            return
        bucketed = pc.and_(pc.invert(pc.starts_with(names, BASE_SURFACE_PREFIX)), pc.match_substring(names, "/"))
        parts = pc.split_pattern(names.filter(bucketed), "/", max_splits=1)
        pairs = pa.table({"bucket": pc.list_element(parts, 0), "id": pc.list_element(parts, 1)})
        pairs = pairs.filter(pc.is_in(pairs["bucket"], pa.array(list(self.by_id), pa.string())))
        ordered = pairs.sort_by([("bucket", "ascending"), ("id", "ascending")])
        grouped = ordered.group_by("bucket", use_threads=False).aggregate([("id", "list")])
        for bucket_id, ids in zip(grouped["bucket"].to_pylist(), grouped["id_list"].to_pylist(), strict=True):
            bucket = self.by_id[bucket_id]
            bucket.stream_ids = sorted(bucket.stream_ids + ids) if bucket.stream_ids else ids

    def stream_added(self, stream_name: str) -> None:
        located = bucket_of(stream_name)
        if located is not None and located[0] in self.by_id:
            bisect.insort(self.by_id[located[0]].stream_ids, located[1])

    def stream_removed(self, stream_name: str) -> None:
        located = bucket_of(stream_name)
        if located is None or located[0] not in self.by_id:
            return
        ids = self.by_id[located[0]].stream_ids
        index = bisect.bisect_left(ids, located[1])
        if index < len(ids) and ids[index] == located[1]:
            del ids[index]
