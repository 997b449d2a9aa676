"""Sleeping streams keep their cached tails (``engine.asleep_tails``): what a stream going to sleep
had cached, and what a flush commits of one appended to asleep, comes back with the ``Stream``
the next lookup builds, in the memory budget all along. The kept tails alone, then a real
``Storage`` + ``Engine`` in this process on a local Delta table, the engine's clock moved by the
test."""

from __future__ import annotations

import asyncio
import gc
from array import array
from collections.abc import Hashable
from pathlib import Path

from local_engine import ManualClock, cold_tails_let_go, open_local, put_to_sleep

from durable_streams_server.engine import reads
from durable_streams_server.engine.asleep_tails import ENTRY_BYTES, AsleepTails, kept_end, kept_of, kept_stamps
from durable_streams_server.engine.engine import Engine, EngineConfig
from durable_streams_server.engine.memory import MemoryBudget
from durable_streams_server.engine.types import AppendRequest, CreateRequest
from durable_streams_server.protocol.offsets import Offset
from durable_streams_server.storage.committer import Storage

IDLE_MS = 60_000


def _tails(limit: int = 0, keep_bytes: int = 1 << 20, max_bytes: int = 1 << 20) -> AsleepTails:
    return AsleepTails(MemoryBudget(limit), keep_bytes, max_bytes)


def test_records_flushed_asleep_continue_the_kept_tail_or_start_it_afresh() -> None:
    tails = _tails()
    tails.extend(7, [(0, (b"a",), 10), (1, (b"b", b"c"), 11)])
    kept = tails.take(7)
    assert kept == (0, (b"a", b"b", b"c"), array("q", [10, 11, 11]).tobytes(), ((1, 2),), 3)
    assert kept_stamps(kept) == array("q", [10, 11, 11])
    tails.keep(7, kept)
    tails.extend(7, [(3, (b"d",), 12)])  # where it ends: continued
    assert tails.take(7) == (0, (b"a", b"b", b"c", b"d"), array("q", [10, 11, 11, 12]).tobytes(), ((1, 2),), 4)
    tails.keep(7, kept)
    tails.extend(7, [(5, (b"f",), 13)])  # past where it ends (seq 3, 4 not here): afresh
    assert tails.take(7) == (5, (b"f",), array("q", [13]).tobytes(), (), 1)
    assert tails.take(7) is None and not len(tails) and tails.nbytes == 0


def test_kept_tails_are_not_scanned_by_full_collections_once_a_collection_has_seen_them() -> None:
    tails = _tails()
    tails.extend(1, [(0, (b"a",), 10)])
    tails.extend(2, [(0, (b"a", b"b"), 10), (2, (b"c",), 11)])
    tails.extend(2, [(3, (b"d",), 12)])
    gc.collect()  # (a tuple of ints and bytes is no longer tracked once a collection has seen it)
    single = tails.take(1)
    assert single is not None and not gc.is_tracked(single), single
    gc.collect()  # (a tuple of tuples: once a collection has seen them untracked, a level at a time)
    gc.collect()
    batched = tails.take(2)
    assert batched is not None and batched[3] == ((0, 2),) and not gc.is_tracked(batched), batched


def test_kept_tails_are_held_in_the_budget_and_bounded_per_stream_and_together() -> None:
    tails = _tails(keep_bytes=4, max_bytes=2 * (4 + ENTRY_BYTES))
    tails.extend(1, [(0, (b"ab",), 4), (1, (b"cd", b"ef"), 5)])  # 6 bytes: the oldest message goes
    kept = tails.take(1)
    assert kept is not None and kept[:2] == (1, (b"cd", b"ef")) and kept_end(kept) == 3
    assert kept_stamps(kept) == array("q", [5, 5]) and kept[3] == ((1, 2),)
    tails.keep(1, kept)
    tails.keep(2, kept_of(0, (b"wxyz",), array("q", [1]), ()))
    assert tails.memory.held == 0  # (until the batch is settled)
    tails.settle()
    assert tails.memory.held == tails.nbytes == 2 * (4 + ENTRY_BYTES)
    tails.keep(3, kept_of(0, (b"new",), array("q", [1]), ()))  # past the bound: the least recently kept goes
    assert 1 not in tails and 2 in tails and 3 in tails
    tails.settle()
    assert tails.memory.held == tails.nbytes == (4 + ENTRY_BYTES) + (3 + ENTRY_BYTES)
    tails.keep(4, kept_of(0, (b"toolarge",), array("q", [1]), ()))  # (nothing of it fits in 4 bytes)
    tails.keep(5, kept_of(3, (), array("q"), ()))  # (nothing to keep)
    assert 4 not in tails and 5 not in tails
    for uid in (2, 3):
        tails.take(uid)
    tails.settle()
    assert tails.memory.held == tails.nbytes == 0


def test_the_budget_lets_the_kept_tails_go_before_any_built_streams_tail() -> None:
    tails = _tails(limit=3 * (1 + ENTRY_BYTES))
    released: list[Hashable] = []
    tails.memory.hold(("tail", 9), 1 + ENTRY_BYTES, released.append)  # (a built stream's, held first)
    for uid in (1, 2):
        tails.extend(uid, [(0, (b"m",), 1)])
    tails.settle()
    assert tails.memory.held == 3 * (1 + ENTRY_BYTES) and not released
    tails.memory.hold(("tail", 8), 1, released.append)  # (over the budget: the kept tails go, all of them)
    assert not len(tails) and tails.nbytes == 0 and not released
    assert tails.memory.held == 2 + ENTRY_BYTES
    tails.extend(3, [(0, (b"n",), 1)])
    tails.settle()
    assert 3 in tails and tails.memory.held == 2 * (1 + ENTRY_BYTES) + 1


def _create(name: str, body: bytes) -> CreateRequest:
    return CreateRequest(name, "text/plain", None, None, None, False, body)


def _append(body: bytes) -> AppendRequest:
    return AppendRequest(body, "text/plain", None, None, False)


async def _open(data_dir: Path, clock: ManualClock, budget: int = 512 << 20) -> tuple[Storage, Engine]:
    # (no history cache: the budget holds the tails only)
    config = EngineConfig(idle_stream_ms=IDLE_MS, memory_budget_bytes=budget, history_cache_bytes=0)
    storage, engine = await open_local(data_dir, 0.02, config, clock)
    engine.idle.step_s = 60.0  # (every stream of a step looked at, however slow this machine)
    return storage, engine


def _from_memory(engine: Engine, name: str, seq: int) -> bytes | None:
    """The stream's messages from ``seq`` as its in-memory tail answers them; ``None``: it does not."""
    found = reads.read_now(engine, engine.get_live(name), Offset(seq), 1 << 20)
    return None if found is None else b"".join(found.chunks)


async def _content(engine: Engine, name: str) -> bytes:
    found = await reads.read(engine, engine.get_live(name), Offset(0), 1 << 20)
    return b"".join(found.chunks)


def test_a_stream_appended_to_asleep_keeps_its_flushed_records_for_reads(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        storage, engine = await _open(tmp_path, clock)
        await engine.create(_create("v1/stream/a", b"one"))
        await storage.close()
        storage, engine = await _open(tmp_path, clock)  # (dormant after the restart: nothing kept)
        index = engine.live.index
        uid = engine.live.index.cold_state("v1/stream/a")[0]  # type: ignore[index]
        await engine.append("v1/stream/a", _append(b"two"))
        await engine.append("v1/stream/a", _append(b"three"))
        await cold_tails_let_go(engine)
        assert index.built(uid) is None and uid in engine.tails.asleep
        assert engine.memory.held == engine.tails.asleep.nbytes == len(b"twothree") + ENTRY_BYTES
        assert _from_memory(engine, "v1/stream/a", 1) == b"twothree"  # (built now, with them in memory)
        stream = engine.streams["v1/stream/a"]
        assert (stream.mem_base, stream.flushed_tail, stream.tail) == (1, 3, 3)
        assert engine.memory.held == stream.flushed_mem_bytes == len(b"twothree")  # (a built stream's entry now)
        assert _from_memory(engine, "v1/stream/a", 0) is None  # (below its tail: from Delta)
        assert await _content(engine, "v1/stream/a") == b"onetwothree"
        await storage.close()

    asyncio.run(scenario())


def test_a_kept_tail_that_does_not_end_at_the_streams_flushed_tail_is_not_given_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        storage, engine = await _open(tmp_path, clock)
        await engine.create(_create("v1/stream/a", b"hello"))
        await engine.append("v1/stream/a", _append(b" world"))
        (uid,) = await put_to_sleep(engine, clock, IDLE_MS, ["v1/stream/a"])
        kept = engine.tails.asleep.take(uid)
        assert kept is not None and kept[:2] == (0, (b"hello", b" world"))
        engine.tails.keep_asleep(uid, kept_of(0, (b"hello",), array("q", [clock.ms]), ()))  # (one short)
        assert _from_memory(engine, "v1/stream/a", 0) is None  # dropped at the build: from Delta
        assert await _content(engine, "v1/stream/a") == b"hello world"
        assert uid not in engine.tails.asleep and engine.memory.held == 0
        assert engine.streams["v1/stream/a"].mem_base == 2
        await storage.close()

    asyncio.run(scenario())


def test_kept_tails_the_budget_let_go_are_read_from_delta(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        storage, engine = await _open(tmp_path, clock, budget=8 * (100 + ENTRY_BYTES))
        names = [f"v1/stream/s{i}" for i in range(6)]
        for index, name in enumerate(names):
            await engine.create(_create(name, bytes([65 + index]) * 100))
        uids = await put_to_sleep(engine, clock, IDLE_MS, names)
        kept = [uid for uid in uids if uid in engine.tails.asleep]
        # (an eighth of the budget for the sleeping streams' tails: one of them)
        assert len(kept) == 1 and engine.tails.asleep.nbytes <= engine.memory.limit // 8
        assert engine.memory.held == engine.tails.asleep.nbytes
        for index, name in enumerate(names):
            assert await _content(engine, name) == bytes([65 + index]) * 100
        await storage.close()

    asyncio.run(scenario())
