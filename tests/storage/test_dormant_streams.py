"""A restart leaves idle streams unparsed (dormant) and builds each on first use, with the
same state as before: a real ``Storage`` + ``Engine`` in this process on a local Delta table."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pyarrow as pa
from local_engine import open_local

from durable_streams_server.engine.buckets import Bucket, Buckets
from durable_streams_server.engine.engine import Engine
from durable_streams_server.engine.types import AppendRequest, CreateRequest
from durable_streams_server.storage.committer import Storage


async def _open(data_dir: Path, flush_interval_s: float = 0.05) -> tuple[Storage, Engine]:
    return await open_local(data_dir, flush_interval_s)


def _create(name: str, body: bytes = b"", **extra: object) -> CreateRequest:
    return CreateRequest(name, "text/plain", None, None, None, False, body, **extra)  # type: ignore[arg-type]


def _append(body: bytes) -> AppendRequest:
    return AppendRequest(body, "text/plain", None, None, False)


async def _stored(storage: Storage, engine: Engine, name: str) -> bytes:
    """The stream's messages as read from Delta (everything is there after a graceful close)."""
    stream = engine.get_live(name)
    messages = await storage.read_messages(stream.uid, 0, stream.tail)
    return b"".join(message.data for message in messages)


def test_idle_streams_stay_unparsed_until_used_and_come_back_whole(tmp_path: Path) -> None:
    async def scenario() -> None:
        storage, engine = await _open(tmp_path)
        await engine.create_bucket("b")
        for index in range(20):
            await engine.create(_create(f"b/s{index:02}", f"m{index}".encode()))
        await engine.create(_create("v1/stream/source", b"src"))
        await engine.create(_create("v1/stream/fork", fork_from="v1/stream/source"))
        await engine.append("b/s03", _append(b"+more"))
        await storage.close()  # graceful: everything is in Delta

        storage, engine = await _open(tmp_path)
        index = engine.live.index
        assert len(engine.streams) == 22 and index.dormant == 20  # the fork and its source are parsed
        assert engine.buckets.get("b").page("", None, 100)[0] == [f"s{i:02}" for i in range(20)]
        assert index.dormant == 20  # listing a bucket builds nothing
        assert "b/s07" in engine.streams and index.dormant == 20

        assert await _stored(storage, engine, "b/s03") == b"m3+more"
        assert index.dormant == 19 and engine.streams["b/s03"].tail == 2
        await engine.append("b/s04", _append(b"!"))  # the write path builds it too
        assert engine.streams["b/s04"].tail == 2 and index.dormant == 18
        await engine.delete("v1/stream/source")  # soft: the (parsed) fork still links it
        assert engine.streams["v1/stream/source"].soft_deleted
        await engine.delete("b/s05")
        assert "b/s05" not in engine.streams and index.dormant == 17
        await engine.create(_create("b/s05", b"again"))  # a new incarnation on a dormant path
        await storage.close()

        storage, engine = await _open(tmp_path)
        assert len(engine.streams) == 22
        assert await _stored(storage, engine, "b/s05") == b"again"
        assert await _stored(storage, engine, "b/s04") == b"m4!"
        assert await _stored(storage, engine, "b/s19") == b"m19"
        assert engine.streams["v1/stream/source"].soft_deleted and engine.streams["v1/stream/source"].forks == 1
        assert engine.buckets.get("b").page("", None, 100)[0] == [f"s{i:02}" for i in range(20)]
        await storage.close()

    asyncio.run(scenario())


def test_wal_records_replayed_over_a_dormant_stream_build_it_first(tmp_path: Path) -> None:
    async def build() -> None:
        storage, engine = await _open(tmp_path)
        await engine.create(_create("v1/stream/a", b"1"))
        await engine.create(_create("v1/stream/b", b"x"))
        await storage.close()

    async def crash() -> None:
        _storage, engine = await _open(tmp_path, flush_interval_s=3600)
        assert engine.live.index.dormant == 2
        await engine.append("v1/stream/a", _append(b"2"))  # acknowledged: in the WAL, not in Delta
        # no close: the loop ends with the flusher still waiting, as a crash would leave it

    async def check() -> None:
        storage, engine = await _open(tmp_path)
        assert engine.live.index.dormant == 1  # "a" was built to replay its record
        assert engine.streams["v1/stream/a"].tail == 2
        await storage.close()
        storage, engine = await _open(tmp_path)
        assert await _stored(storage, engine, "v1/stream/a") == b"12"
        await storage.close()

    asyncio.run(build())
    asyncio.run(crash())
    asyncio.run(check())


def test_bucket_index_rebuilt_from_paths_matches_one_by_one_inserts() -> None:
    rng = random.Random(7)
    alphabet = "abzAZ09-_.~é€𝄞"
    names = [f"b{rng.randrange(3)}/{''.join(rng.choices(alphabet, k=rng.randrange(1, 8)))}" for _ in range(3000)]
    names = [*dict.fromkeys(names), "v1/stream/base", "nobucket/x"]
    at_once, one_by_one = Buckets(), Buckets()
    for buckets in (at_once, one_by_one):
        for uid, bucket_id in enumerate(("b0", "b1", "b2")):
            buckets.add(Bucket(bucket_id, uid, 0))
    at_once.by_id["b2"].stream_ids = ["already"]  # merged with what is indexed
    one_by_one.stream_added("b2/already")
    at_once.index_streams(pa.chunked_array([pa.array(names[:1000]), pa.array(names[1000:])]))
    for name in names:
        one_by_one.stream_added(name)
    for bucket_id in ("b0", "b1", "b2"):
        assert at_once.by_id[bucket_id].stream_ids == one_by_one.by_id[bucket_id].stream_ids
        assert len(at_once.by_id[bucket_id].stream_ids) > 500
