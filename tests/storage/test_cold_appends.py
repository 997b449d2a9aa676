"""Appends to a sleeping stream leave it asleep (``engine.cold_appends``, ``engine.cold_tails``) and
are what an append to a built stream is: the same offsets, reads, visibility, state in Delta and
after a restart. A real ``Storage`` + ``Engine`` in this process on a local Delta table, the
engine's clock moved by the test."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from local_engine import ManualClock, cold_tails_let_go, open_local, put_to_sleep

from durable_streams_server.engine import reads
from durable_streams_server.engine.engine import Engine, EngineConfig
from durable_streams_server.engine.stream import Stream
from durable_streams_server.engine.types import AppendRequest, AppendResult, CreateRequest, VisibleStream
from durable_streams_server.protocol.errors import BadRequest, Conflict, NotFound
from durable_streams_server.protocol.headers import ProducerHeaders
from durable_streams_server.protocol.offsets import Offset, encode_seq
from durable_streams_server.storage.committer import Storage

IDLE_MS = 60_000
T = TypeVar("T")


async def _open(data_dir: Path, clock: ManualClock, flush_interval_s: float = 0.02) -> tuple[Storage, Engine]:
    storage, engine = await open_local(data_dir, flush_interval_s, EngineConfig(idle_stream_ms=IDLE_MS), clock)
    engine.idle.step_s = 60.0
    return storage, engine


def _create(name: str, body: bytes = b"", content_type: str = "text/plain", **extra: object) -> CreateRequest:
    return CreateRequest(name, content_type, None, None, None, False, body, **extra)  # type: ignore[arg-type]


def _append(body: bytes, content_type: str = "text/plain", **fields: Any) -> AppendRequest:
    plain: dict[str, Any] = {"producer": None, "stream_seq": None, "close": False}
    return AppendRequest(body, content_type, **{**plain, **fields})


async def _content(engine: Engine, name: str) -> tuple[bytes, int]:
    found = await reads.read(engine, engine.get_live(name), Offset(0), 1 << 20)
    return b"".join(found.chunks), found.next.seq


async def _stepped(coro: Coroutine[Any, Any, T], at_first_wait: Callable[[], None]) -> T:
    """Run ``coro``, calling ``at_first_wait`` where it first waits (for the append: after its
    record was submitted, before it can be durable: nothing else has run on the loop)."""
    yielded = coro.send(None)
    at_first_wait()
    while True:
        if yielded is None:
            await asyncio.sleep(0)
        else:  # (a future the inner coroutine yielded, as a task would take it: ``Task.__step``)
            yielded._asyncio_future_blocking = False
            await yielded
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            result: T = stop.value
            return result


def test_an_append_to_a_sleeping_stream_leaves_it_asleep_and_in_delta_and_after_a_restart(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        storage, engine = await _open(tmp_path, clock)
        await engine.create(_create("v1/stream/text", b"hello"))
        await engine.create(_create("v1/stream/json", b'[{"a":1}]', "application/json"))
        text, json_uid = await put_to_sleep(engine, clock, IDLE_MS, ["v1/stream/text", "v1/stream/json"])
        index = engine.live.index
        clock.ms += 5
        outcome = await engine.append("v1/stream/text", _append(b" world"))
        assert (outcome.result, outcome.tail, outcome.closed) == (AppendResult.STORED, 2, False)
        json_outcome = await engine.append("v1/stream/json", _append(b'[{"b":2},{"c":3}]', "application/json"))
        assert json_outcome.tail == 3
        assert index.built(text) is None and index.built(json_uid) is None  # neither was built
        assert index.cold_tails.appends == 2
        await cold_tails_let_go(engine)  # (flushed and visible: its state says all)
        state = index.look("v1/stream/text")
        assert isinstance(state, dict)
        assert (state["tail"], state["bytes_total"], state["last_write_ms"], state["last_access_ms"]) == (
            2,
            len(b"hello world"),
            clock.ms,
            clock.ms,
        )
        assert index.built(text) is None
        assert index.built(text) is None and text in engine.tails.asleep  # (flushed: the tail it keeps asleep)
        assert await _content(engine, "v1/stream/text") == (b"hello world", 2)  # (from that tail: built now)
        assert engine.streams["v1/stream/text"].mem_base == 0 and text not in engine.tails.asleep
        assert engine.streams["v1/stream/json"].bytes_total == len(b'{"a":1}{"b":2}{"c":3}')
        assert (await engine.append("v1/stream/text", _append(b"!"))).tail == 3  # built: the ordinary path
        await storage.close()

        storage, engine = await _open(tmp_path, clock)
        assert await _content(engine, "v1/stream/text") == (b"hello world!", 3)
        # (the messages: the HTTP layer frames them as a JSON array)
        assert await _content(engine, "v1/stream/json") == (b'{"a":1}{"b":2}{"c":3}', 3)
        await storage.close()

    asyncio.run(scenario())


def test_a_sleeping_stream_built_before_its_append_is_flushed_has_it_in_memory(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        storage, engine = await _open(tmp_path, clock)
        await engine.create(_create("v1/stream/early", b"one"))
        await storage.close()
        storage, engine = await _open(tmp_path, clock, flush_interval_s=3600)  # (no flush until the close)
        index = engine.live.index
        uid = index.cold_state("v1/stream/early")[0]  # type: ignore[index]  # (dormant since the restart)
        looked: dict[str, Any] = {}

        def before_durable() -> None:  # the record is submitted; nothing has made it durable yet
            cold = index.cold_tails.get(uid)
            assert cold is not None
            looked["cold"], looked["tails"] = cold, (cold.tail, cold.flushed_tail, cold.visible_tail)

        outcome = await _stepped(engine.append("v1/stream/early", _append(b"two")), before_durable)
        assert outcome.tail == 2
        cold = looked["cold"]
        assert looked["tails"] == (2, 1, 1)  # readers see the durable tail only
        assert (cold.tail, cold.flushed_tail, cold.visible_tail) == (2, 1, 2)
        assert index.built(uid) is None
        await engine.append("v1/stream/early", _append(b"three"))

        stream = engine.get_live("v1/stream/early")  # built before any flush: from its cold tail
        assert index.cold_tails.get(uid) is None and cold.stream is stream
        assert (stream.tail, stream.visible_tail, stream.flushed_tail, stream.mem_base, len(stream.mem)) == (
            3,
            3,
            1,
            1,
            2,
        )
        assert stream.bytes_total == len(b"onetwothree") and stream.last_lsn == cold.last_lsn
        assert await _content(engine, "v1/stream/early") == (b"onetwothree", 3)
        assert not engine.idle._quiesce(stream, clock.ms + IDLE_MS, IDLE_MS, storage.flushed_lsn)  # unflushed
        await storage.close()  # (its last flush)

        storage, engine = await _open(tmp_path, clock)
        assert await _content(engine, "v1/stream/early") == (b"onetwothree", 3)
        await storage.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("lookup", ["lookup", "look"])
def test_a_stream_built_while_its_cold_append_is_not_yet_durable_sees_it_become_visible(
    tmp_path: Path, lookup: str
) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        storage, engine = await _open(tmp_path, clock)
        await engine.create(_create("v1/stream/racing", b"a"))
        (uid,) = await put_to_sleep(engine, clock, IDLE_MS, ["v1/stream/racing"])
        built: dict[str, Any] = {}

        def build_now() -> None:  # a read's lookup (or a look: the status page, a consumer's lag) meanwhile
            if lookup == "look":
                stream = engine.live.index.look("v1/stream/racing")
                assert isinstance(stream, Stream)
            else:
                stream = engine.streams["v1/stream/racing"]
            built["at_build"] = (stream.tail, stream.visible_tail, len(stream.mem))
            built["stream"] = stream

        await _stepped(engine.append("v1/stream/racing", _append(b"b")), build_now)
        # built with the durable tail only, in memory the message it kept asleep and the new one
        assert built["at_build"] == (2, 1, 2)
        stream = built["stream"]
        assert stream.visible_tail == 2  # then made visible, as a built stream's append is
        assert engine.live.index.built(uid) is stream
        assert await _content(engine, "v1/stream/racing") == (b"ab", 2)
        await storage.close()

    asyncio.run(scenario())


class _Hooks:
    def __init__(self) -> None:
        self.visible: list[tuple[str, int]] = []

    def on_visible(self, stream: VisibleStream) -> None:
        self.visible.append((stream.name, stream.visible_tail))

    def on_removed(self, stream: object) -> None: ...


def test_a_cold_append_tells_the_hooks_its_new_tail(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        storage, engine = await _open(tmp_path, clock)
        await engine.create(_create("v1/stream/hooked", b"a"))
        await put_to_sleep(engine, clock, IDLE_MS, ["v1/stream/hooked"])
        hooks = _Hooks()
        engine.live.hooks = hooks
        await engine.append("v1/stream/hooked", _append(b"b"))
        assert hooks.visible == [("v1/stream/hooked", 2)]
        await storage.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("request_", "result"),
    [
        (_append(b"p", producer=ProducerHeaders("p1", 0, 0)), AppendResult.STORED_FOR_PRODUCER),
        (_append(b"s", stream_seq="0001"), AppendResult.STORED),
        (_append(b"i", if_match=f'"{encode_seq(1)}"'), AppendResult.STORED),
        (_append(b"", None, close=True), AppendResult.STORED),
    ],
    ids=["producer", "stream-seq", "if-match", "close"],
)
def test_appends_that_need_the_built_stream_build_it(
    tmp_path: Path, request_: AppendRequest, result: AppendResult
) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        storage, engine = await _open(tmp_path, clock)
        await engine.create(_create("v1/stream/needs", b"x"))
        (uid,) = await put_to_sleep(engine, clock, IDLE_MS, ["v1/stream/needs"])
        outcome = await engine.append("v1/stream/needs", request_)
        assert engine.live.index.built(uid) is not None and engine.live.index.cold_tails.appends == 0
        assert outcome.result is result
        await storage.close()

    asyncio.run(scenario())


def test_a_refused_append_to_a_sleeping_stream_is_refused_as_before_and_changes_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        storage, engine = await _open(tmp_path, clock)
        await engine.create(_create("v1/stream/plain", b"x"))
        await engine.create(_create("v1/stream/json", b"[1]", "application/json"))
        await engine.create(_create("v1/stream/closed", b"x"))
        await engine.append("v1/stream/closed", AppendRequest(b"", None, None, None, True))
        await engine.create(CreateRequest("v1/stream/ttl", "text/plain", 2 * IDLE_MS // 1000, None, None, False, b"x"))
        names = ["v1/stream/plain", "v1/stream/json", "v1/stream/closed", "v1/stream/ttl"]
        await put_to_sleep(engine, clock, IDLE_MS, names)
        clock.ms += 2 * IDLE_MS
        with pytest.raises(Conflict) as mismatch:
            await engine.append("v1/stream/plain", _append(b"y", "application/octet-stream"))
        assert mismatch.value.code == "CONTENT_TYPE_MISMATCH"
        with pytest.raises(BadRequest):
            await engine.append("v1/stream/json", _append(b"{not json", "application/json"))
        with pytest.raises(Conflict) as closed:
            await engine.append("v1/stream/closed", _append(b"y"))
        assert closed.value.code == "STREAM_CLOSED"
        with pytest.raises(NotFound):  # (its TTL ran out while it slept)
            await engine.append("v1/stream/ttl", _append(b"y"))
        assert engine.live.index.cold_tails.appends == 0
        assert [(await _content(engine, name))[1] for name in names[:3]] == [1, 1, 1]
        await storage.close()

    asyncio.run(scenario())
