"""The cold streams' columns (``engine.cold_streams``) answer as a dictionary would, through
merges of recent sleepers into the segment and rewrites without the woken rows; and a
restart's dormant rows go in as the Arrow columns recovery read."""

from __future__ import annotations

import itertools
import random

import numpy as np
import orjson
import pyarrow as pa
import pytest

from durable_streams_server.engine.cold_streams import MERGE_AT, ColdStreams, state_json
from durable_streams_server.storage.state_rows import DormantStates


def _state(name: str, uid: int, tail: int) -> dict[str, object]:
    return {"name": name, "uid": uid, "content_type": "text/plain", "created_ms": 1, "tail": tail}


def _check(cold: ColdStreams, model: dict[int, dict[str, object]], names: dict[str, int]) -> None:
    assert len(cold) == len(model)
    assert sorted(cold.uids()) == sorted(model)
    assert sorted(cold.names()) == sorted(names)


def test_puts_and_takes_in_any_order_answer_as_a_dictionary() -> None:
    rng = random.Random(7)
    dormant_count = 3 * MERGE_AT
    dormant = [(f"v1/stream/restored-{uid}", uid) for uid in range(1, dormant_count + 1)]
    model = {uid: _state(name, uid, uid % 5) for name, uid in dormant}
    names = {name: uid for name, uid in dormant}
    rows = [(name, uid, orjson.dumps(model[uid]).decode()) for name, uid in dormant]
    cuts = [0, 100, MERGE_AT + 7, len(rows)]  # (uneven chunks, as recovery reads them)
    chunks = [rows[start:end] for start, end in itertools.pairwise(cuts)]
    cold = ColdStreams.of(
        DormantStates(
            pa.chunked_array([[row[0] for row in chunk] for chunk in chunks], pa.string()),
            np.array([row[1] for row in rows], np.int64),
            pa.chunked_array([[row[2] for row in chunk] for chunk in chunks], pa.string()),
        )
    )
    _check(cold, model, names)
    built: dict[int, dict[str, object]] = {}
    next_uid = dormant_count + 1
    for step in range(12 * MERGE_AT):
        roll = rng.random()
        if roll < 0.45 and model:  # wake one: its state, and no longer cold
            uid = rng.choice(list(model)) if step % 7 else max(model)
            assert cold.peek(uid) == model[uid]
            if step % 3 == 0:  # found by path first, as a request wakes it (the wake reuses the row found)
                assert cold.uid_of(str(model[uid]["name"])) == uid
                if step % 2:  # a sleeper in between (a merge of sleepers, at times)
                    name = f"v1/stream/new-{next_uid}"
                    model[next_uid], names[name] = _state(name, next_uid, 0), next_uid
                    cold.put(name, next_uid, state_json(model[next_uid]))
                    next_uid += 1
            assert cold.take(uid) == model[uid]
            built[uid] = model.pop(uid)
            del names[str(built[uid]["name"])]
        elif roll < 0.75 and built:  # back to sleep, its tail moved on
            uid = rng.choice(list(built))
            state = built.pop(uid)
            state["tail"] = int(str(state["tail"])) + 1
            cold.put(str(state["name"]), uid, state_json(state) if uid % 2 else orjson.dumps(state))
            model[uid], names[str(state["name"])] = state, uid
        else:  # a new stream goes to sleep
            name = f"v1/stream/new-{next_uid}"
            model[next_uid], names[name] = _state(name, next_uid, 0), next_uid
            cold.put(name, next_uid, state_json(model[next_uid]))
            next_uid += 1
        probe = rng.choice(list(names)) if names and rng.random() < 0.5 else f"v1/stream/absent-{step}"
        assert cold.uid_of(probe) == names.get(probe)
        uid = rng.randrange(1, next_uid)
        assert cold.holds(uid) == (uid in model)
        assert cold.peek(uid) == model.get(uid)
        if step % 997 == 0:
            _check(cold, model, names)
    _check(cold, model, names)
    for uid in list(model):  # every one taken: none is left, whatever was merged or dropped
        assert cold.take(uid) == model.pop(uid)
    assert len(cold) == 0 and list(cold.names()) == [] and cold.take(1) is None


def test_a_state_put_to_sleep_is_kept_without_its_name_and_uid_and_found_whole() -> None:
    state = _state("v1/stream/orders", 7, 3)
    kept = state_json(state)
    assert state == _state("v1/stream/orders", 7, 3)  # (the caller's state as it was)
    assert b"orders" not in kept and b'"uid"' not in kept and orjson.loads(kept)["tail"] == 3
    cold = ColdStreams()
    cold.put("v1/stream/orders", 7, kept)
    assert cold.peek(7) == state  # (recent)
    for uid in range(100, 100 + MERGE_AT - 1):  # (MERGE_AT put to sleep: merged into the segment)
        cold.put(f"v1/stream/s{uid}", uid, state_json(_state(f"v1/stream/s{uid}", uid, 0)))
    assert cold.uid_of("v1/stream/orders") == 7 and cold.peek(7) == state
    assert cold.peek(7, "v1/stream/orders") == state  # (the path its caller found it by)
    assert cold.take(7) == state and cold.peek(7) is None


def test_woken_rows_are_dropped_once_they_are_the_majority() -> None:
    cold = ColdStreams()
    count = 4 * MERGE_AT
    for uid in range(count):
        cold.put(f"s{uid}", uid, orjson.dumps(_state(f"s{uid}", uid, 0)))
    for uid in range(count - MERGE_AT // 2):
        assert cold.take(uid) is not None
    assert cold.rows() < count  # (rewritten without the woken rows)
    assert sorted(cold.uids()) == list(range(count - MERGE_AT // 2, count))
    assert cold.uid_of(f"s{count - 1}") == count - 1 and cold.uid_of("s0") is None


def test_names_taken_are_those_of_the_moment_they_were_taken() -> None:
    """A listing takes the names on the loop and reads them on a thread (``take_names``): what
    the index does in between (a stream woken, one put to sleep, a merge) is not in them."""
    cold = ColdStreams()
    for uid in range(MERGE_AT + 10):  # (MERGE_AT merged into the segment, 10 recent)
        cold.put(f"s{uid}", uid, orjson.dumps(_state(f"s{uid}", uid, 0)))
    whole = cold.take_names(["built"])
    assert whole.alive is None  # (no dead row: nothing copied, nothing to filter)
    assert cold.take(3) is not None and cold.take(MERGE_AT + 1) is not None  # (a segment row, a recent one)
    taken = cold.take_names(["built"])
    assert taken.alive is not None and not taken.alive[3]
    expected = ["built", *(f"s{uid}" for uid in range(MERGE_AT + 10) if uid not in (3, MERGE_AT + 1))]
    assert cold.take(5) is not None  # (after the snapshot: a dead row more, in place)
    for uid in range(10_000, 10_000 + MERGE_AT):  # (and a merge: the segment's chunks and bits replaced)
        cold.put(f"s{uid}", uid, orjson.dumps(_state(f"s{uid}", uid, 0)))
    assert sorted(taken.column().to_pylist()) == sorted(expected)
    assert sorted(whole.column().to_pylist()) == sorted(["built", *(f"s{uid}" for uid in range(MERGE_AT + 10))])
    assert "s5" not in cold.take_names([]).column().to_pylist()


def test_columns_of_a_view_type_are_refused_not_misread() -> None:
    """A view type's buffers are laid out otherwise than offsets and values: read as those, its
    cells would be garbage, so the columns are refused by name."""
    views = DormantStates.of(
        pa.array(["v1/stream/a"], pa.string_view()),
        pa.array([1], pa.int64()),
        pa.array([orjson.dumps(_state("v1/stream/a", 1, 0)).decode()], pa.string()),
    )
    with pytest.raises(TypeError, match="not string_view"):
        ColdStreams.of(views)
