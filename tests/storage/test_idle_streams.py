"""Streams idle in memory go back to sleep (``engine.idle``, ``StreamIndex.sleep``) and come back
whole: a real ``Storage`` + ``Engine`` in this process on a local Delta table, the engine's
clock moved by the test."""

from __future__ import annotations

import asyncio
import gc
import time
from pathlib import Path
from typing import Any

from local_engine import ManualClock, open_local

from durable_streams_server.engine import reads
from durable_streams_server.engine.engine import Engine, EngineConfig
from durable_streams_server.engine.full_collections import FULL_SCANS, FullCollections
from durable_streams_server.engine.idle import MOST_BUILT, PRESSED_IDLE_MS, IdleStreams, most_built
from durable_streams_server.engine.memory import MemoryBudget
from durable_streams_server.engine.retention_state import RetentionState
from durable_streams_server.engine.stream import ProducerState, Stream
from durable_streams_server.engine.stream_index import StreamIndex
from durable_streams_server.engine.tail_caches import TailCaches
from durable_streams_server.engine.types import AppendRequest, AppendResult, CreateRequest
from durable_streams_server.protocol.headers import ProducerHeaders
from durable_streams_server.protocol.offsets import Offset
from durable_streams_server.protocol.retention import RetentionPolicy
from durable_streams_server.storage.committer import Storage

IDLE_MS = 60_000


async def _open(data_dir: Path, clock: ManualClock, flush_interval_s: float = 0.02) -> tuple[Storage, Engine]:
    storage, engine = await open_local(data_dir, flush_interval_s, EngineConfig(idle_stream_ms=IDLE_MS), clock)
    engine.idle.step_s = 60.0  # (every stream of a step looked at, however slow this machine)
    return storage, engine


def _create(name: str, body: bytes = b"", content_type: str = "text/plain", **extra: object) -> CreateRequest:
    return CreateRequest(name, content_type, None, None, None, False, body, **extra)  # type: ignore[arg-type]


def _append(body: bytes, producer: ProducerHeaders | None = None, close: bool = False) -> AppendRequest:
    return AppendRequest(body, None, producer, None, close)


async def _flushed(engine: Engine, names: list[str]) -> None:
    deadline = time.monotonic() + 30
    while not all(engine.streams[name].flushed_tail == engine.streams[name].tail for name in names):
        assert time.monotonic() < deadline, "not flushed"
        await asyncio.sleep(0.02)


async def _everything(engine: Engine, name: str) -> tuple[object, ...]:
    stream = engine.get_live(name)
    found = await reads.read(engine, stream, Offset(0), 1 << 20)
    return (b"".join(found.chunks), found.stamps, found.next, found.up_to_date, found.closed)


def _state(engine: Engine, name: str) -> dict[str, object]:
    return engine.streams[name].to_state(written_ms=0)


def test_idle_streams_sleep_and_come_back_whole(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        storage, engine = await _open(tmp_path, clock)
        producer = ProducerHeaders("p1", 3, 0)
        await engine.create(_create("v1/stream/text", b"hello"))
        await engine.append("v1/stream/text", _append(b" world"))
        await engine.create(_create("v1/stream/json", b'[{"a":1},{"b":2}]', "application/json"))
        await engine.create(_create("v1/stream/produced"))
        await engine.append("v1/stream/produced", _append(b"x", producer))
        await engine.create(_create("v1/stream/closed", b"last"))
        await engine.append("v1/stream/closed", _append(b"", close=True))
        await engine.create(_create("v1/stream/source", b"src"))
        await engine.create(_create("v1/stream/fork", fork_from="v1/stream/source"))
        sleepers = ["v1/stream/text", "v1/stream/json", "v1/stream/produced", "v1/stream/closed"]
        everyone = [*sleepers, "v1/stream/source", "v1/stream/fork"]
        await _flushed(engine, everyone)
        before = {name: (_state(engine, name), await _everything(engine, name)) for name in everyone}
        assert engine.memory.held > 0  # (the flushed tails are cached)

        index = engine.live.index
        assert engine.idle.step() == 0  # used just now
        clock.ms += IDLE_MS
        assert engine.idle.step() == len(sleepers)
        assert index.dormant == len(sleepers)
        assert {name for name in everyone if name in index.names() and _built(engine, name)} == {
            "v1/stream/source",
            "v1/stream/fork",
        }  # a fork and its source keep what their states do not carry
        assert len(engine.tails.asleep) == len(sleepers)  # their cached tails kept asleep, in the budget
        assert engine.memory.held == len(b"src") + engine.tails.asleep.nbytes
        assert len(engine.streams) == len(everyone) and all(name in engine.streams for name in sleepers)
        gc.collect()
        assert not [o for o in gc.get_objects() if isinstance(o, Stream) and o.name in sleepers]

        for name in sleepers:  # built again on use, as they were, their tails in memory again
            state, content = before[name]
            assert await _everything(engine, name) == content
            assert _state(engine, name) == state
            assert engine.streams[name].mem_base == 0 and len(engine.streams[name].mem) == state["tail"]
        assert engine.streams["v1/stream/json"].batches == {0: 2}  # (its first record's two messages)
        assert index.dormant == 0 and not len(engine.tails.asleep)
        assert engine.memory.held == sum(engine.streams[name].flushed_mem_bytes for name in everyone)
        # and they go on where they were: offsets, producer deduplication, the close
        assert (await engine.append("v1/stream/text", _append(b"!"))).tail == 3
        repeat = await engine.append("v1/stream/produced", _append(b"x", producer))
        assert repeat.result == AppendResult.DUPLICATE and repeat.tail == 1
        assert engine.streams["v1/stream/closed"].closed
        await storage.close()

        storage, engine = await _open(tmp_path, clock)  # and a restart finds the same
        assert (await _everything(engine, "v1/stream/text"))[0] == b"hello world!"
        assert _state(engine, "v1/stream/produced")["producers"] == before["v1/stream/produced"][0]["producers"]
        await storage.close()

    asyncio.run(scenario())


def _built(engine: Engine, name: str) -> bool:
    index = engine.live.index
    return any(
        stream is not None and stream.name == name for stream in (index.built(uid) for uid in index.built_uids())
    )


def test_a_stream_something_refers_to_stays_built(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        storage, engine = await _open(tmp_path, clock)
        await engine.create(_create("v1/stream/held", b"m"))
        await _flushed(engine, ["v1/stream/held"])
        held = engine.streams["v1/stream/held"]  # as a request in flight would
        clock.ms += IDLE_MS
        assert engine.idle.step() == 0 and _built(engine, "v1/stream/held")
        assert not len(held.mem)  # (its cached tail was let go: reads come from Delta)
        del held
        assert engine.idle.step() == 1 and not _built(engine, "v1/stream/held")
        await storage.close()

    asyncio.run(scenario())


def test_a_stream_not_all_in_delta_or_waited_on_stays_built(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        storage, engine = await _open(tmp_path, clock, flush_interval_s=3600)  # (no flush)
        await engine.create(_create("v1/stream/unflushed", b"m"))
        clock.ms += IDLE_MS
        assert engine.idle.step() == 0 and len(engine.streams["v1/stream/unflushed"].mem) == 1
        await storage.close()

        storage, engine = await _open(tmp_path, clock)
        await engine.create(_create("v1/stream/waited"))
        stream = engine.streams["v1/stream/waited"]
        waiting = asyncio.ensure_future(reads.wait_for_change(stream, 0, 30))
        del stream
        await asyncio.sleep(0.05)
        clock.ms += IDLE_MS
        assert engine.idle.step() == 0 and _built(engine, "v1/stream/waited")
        await engine.append("v1/stream/waited", _append(b"news"))
        await asyncio.wait_for(waiting, 10)
        await storage.close()

    asyncio.run(scenario())


def test_a_sleeping_state_keeps_every_field() -> None:
    index = StreamIndex()
    fields: dict[str, Any] = {
        "name": "v1/stream/every",
        "uid": 7,
        "content_type": "application/json",
        "created_ms": 1_700_000_000_000,
        "ttl_s": 0,  # (a zero that is not a default)
        "expires_at": "2030-01-01T00:00:00Z",
        "expires_at_ms": 1_893_456_000_000,
        "closed": True,
        "closed_by": ("p", 1, 2),
        "tail": 0,
        "producers": {"p": ProducerState(1, 2)},
        "stream_seq": "0042",
        "last_access_ms": 5,
        "last_write_ms": 6,
        "snapshot_lsn": 9,
    }
    index.by_uid[7] = index.by_name["v1/stream/every"] = Stream(**fields)
    expected = index.by_uid[7].to_state(written_ms=0)
    assert index.sleep(7) and index.built(7) is None and "v1/stream/every" in index.by_name
    assert index.by_name["v1/stream/every"].to_state(written_ms=0) == expected
    index.by_uid[8] = index.by_name["v1/stream/plain"] = Stream("v1/stream/plain", 8, "text/plain", 1)
    expected = index.by_uid[8].to_state(written_ms=0)
    assert index.sleep(8) and index.by_uid[8].to_state(written_ms=0) == expected
    # what recovery parses at start (a fork, soft-deleted, a retention point or policy) does not sleep either
    policy = {"retention": RetentionState(RetentionPolicy(max_messages=5))}
    derived_states = ({"fork_of": 8}, {"soft_deleted": True}, {"snapshot_seq": 3}, policy)
    for uid, derived in enumerate(derived_states, start=9):
        name = f"v1/stream/{uid}"
        index.by_uid[uid] = index.by_name[name] = Stream(name, uid, "text/plain", 1, **derived)  # type: ignore[arg-type]
        assert not index.sleep(uid) and index.built(uid) is not None


def test_a_step_takes_its_batch_or_its_time_whichever_ends_first() -> None:
    index = StreamIndex()
    for uid in range(1, 11):
        index.by_uid[uid] = index.by_name[f"v1/stream/s{uid}"] = Stream(f"v1/stream/s{uid}", uid, "text/plain", 1)
    idle = IdleStreams(
        index, TailCaches(MemoryBudget(0), index, 0), clock=lambda: 10 * IDLE_MS, idle_ms=IDLE_MS, batch=4, step_s=60.0
    )
    assert [idle.step(), idle.step(), idle.step()] == [4, 4, 2]  # the oldest first, in batches
    assert index.dormant == 10 and idle.slept == 10
    for uid in range(11, 14):
        index.by_uid[uid] = index.by_name[f"v1/stream/s{uid}"] = Stream(f"v1/stream/s{uid}", uid, "text/plain", 1)
    idle.step_s = 0.0  # out of time after the first
    assert [idle.step(), idle.step(), idle.step(), idle.step()] == [1, 1, 1, 0]
    assert index.dormant == 13


def test_under_load_a_stream_unused_through_the_last_full_collections_sleeps_sooner() -> None:
    """Every full collection of the cyclic collector scans each built stream: one unused through
    the last ``FULL_SCANS`` of them (and for a second) sleeps without waiting ``idle_ms``; before
    that many have run (a quiet server), the idle time holds. (The collections are told to the
    sweep here as the collector tells them, so that none of this process's own counts.)"""
    clock = ManualClock()
    index = StreamIndex()
    idle = IdleStreams(index, TailCaches(MemoryBudget(0), index, 0), clock, idle_ms=IDLE_MS, step_s=60.0)

    def used(uid: int, at_ms: int) -> None:
        name = f"v1/stream/s{uid}"
        index.by_uid[uid] = index.by_name[name] = Stream(name, uid, "text/plain", at_ms, last_access_ms=at_ms)

    def full_collection() -> None:
        idle.full_collections.collected("start", {"generation": 2})
        idle.full_collections.collected("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
        clock.ms += 1

    start = clock.ms
    used(1, start)
    used(2, start)
    clock.ms += 2 * PRESSED_IDLE_MS
    assert idle.step() == 0  # (no full collection so far)
    for _ in range(FULL_SCANS - 1):
        full_collection()
        idle.full_collections.collected("stop", {"generation": 1, "collected": 0, "uncollectable": 0})
    assert idle.step() == 0  # (one too few: younger generations' collections do not count)
    used(3, clock.ms)  # (after the oldest of the full collections, before the newest)
    full_collection()
    assert idle.step() == 2 and index.built(3) is not None
    clock.ms += 2 * PRESSED_IDLE_MS
    used(4, clock.ms - PRESSED_IDLE_MS)
    assert idle.step() == 0 and index.awake == 2  # (neither unused through all of the last FULL_SCANS)
    for _ in range(FULL_SCANS):
        full_collection()
    assert idle.step() == 2 and index.awake == 0


def test_the_collectors_full_collections_are_noted_while_started() -> None:
    clock = ManualClock()
    noted = FullCollections(clock)
    noted.start()
    try:
        for _ in range(FULL_SCANS):
            gc.collect(1)  # (younger generations: not noted)
        assert noted.oldest() is None
        for _ in range(FULL_SCANS):
            gc.collect()
        assert noted.oldest() == clock.ms
    finally:
        noted.close()
    assert noted.collected not in gc.callbacks
    clock.ms += 1
    gc.collect()
    assert noted.oldest() == clock.ms - 1  # (closed: no longer noted)


def test_the_streams_built_at_once_are_a_share_of_the_memory_budget_at_most_the_collectors_bound() -> None:
    """The default 512 MiB budget would allow 65,536 (8 KiB each): the collector's bound caps it;
    a small budget caps it lower; without a budget the bound still holds."""
    assert most_built(512 * 1024 * 1024) == MOST_BUILT == 16384
    assert most_built(64 * 1024 * 1024) == 8192
    assert most_built(1) == 1 and most_built(0) == MOST_BUILT


def test_past_the_most_built_streams_unused_for_a_second_sleep_once_in_delta(tmp_path: Path) -> None:
    """More streams built than the memory budget's share (``most_built``): a stream unused for
    ``PRESSED_IDLE_MS`` sleeps without waiting ``idle_ms``, but only once its records are in
    Delta (a flush would otherwise build it again); below the cap, the idle time holds."""

    async def scenario() -> None:
        clock = ManualClock()
        storage, engine = await _open(tmp_path, clock)
        engine.idle.most_built = 4
        names = [f"v1/stream/s{index}" for index in range(10)]
        for name in names:
            await engine.create(_create(name, b"m"))
        await engine.append(names[-1], _append(b"n"))
        await _flushed(engine, names)
        last = engine.streams[names[-1]].last_lsn
        clock.ms += PRESSED_IDLE_MS - 1
        assert engine.idle.step() == 0  # used less than a second ago
        clock.ms += 1
        engine.idle.flushed_lsn = lambda: last - 1  # (as if the append's record were not in Delta yet)
        assert engine.idle.step() == 9 and engine.live.index.awake == 1
        engine.idle.flushed_lsn = lambda: last
        assert engine.idle.step() == 0  # below the cap: the idle time holds again
        assert (await _everything(engine, names[-1]))[0] == b"mn"
        assert [(await _everything(engine, name))[0] for name in names[:3]] == [b"m"] * 3
        await storage.close()

    asyncio.run(scenario())
