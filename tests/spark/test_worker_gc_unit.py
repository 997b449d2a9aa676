"""``freeze_worker_imports`` in this process (no Spark): when it freezes, and when it leaves
the collector alone; and the option that turns it on. Each test unfreezes what it froze."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from pyspark_durable_streams import _worker_gc
from pyspark_durable_streams._worker_gc import REEXAMINE_S, REFREEZE_AT, freeze_worker_imports
from pyspark_durable_streams.options import OptionError, parse_read_options, parse_write_options

URL = "http://127.0.0.1:1/v1/stream/x"


class Survivor:
    """A tracked object that outlives a collection (held by the test)."""

    other: Survivor | None = None


@pytest.fixture
def reused_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()


def test_a_reused_worker_freezes_then_only_when_enough_survived(reused_worker: None) -> None:
    assert gc.get_freeze_count() == 0
    assert freeze_worker_imports() is True
    frozen = gc.get_freeze_count()
    assert frozen > 1_000  # this process's imports at least
    assert len(gc.get_objects(generation=2)) == 0

    assert freeze_worker_imports() is False  # nothing new survived
    few = [Survivor() for _ in range(REFREEZE_AT // 2)]
    gc.collect()
    assert freeze_worker_imports() is False
    # Not frozen: still in the collector's oldest generation. (Not the freeze count: frozen
    # objects freed by their reference count leave it, whatever this process's threads drop.)
    unfrozen = {id(item) for item in gc.get_objects(generation=2)}
    assert all(id(survivor) in unfrozen for survivor in few)

    many = [Survivor() for _ in range(REFREEZE_AT)]
    gc.collect()  # as the daemon's collection after a task: survivors reach generation 2
    assert freeze_worker_imports() is True
    # Frozen: tracked, and in none of the collector's generations (the freeze count could not
    # tell, for the reason above).
    collected = {id(item) for item in gc.get_objects()}
    assert all(gc.is_tracked(survivor) and id(survivor) not in collected for survivor in few + many)
    assert len(gc.get_objects(generation=2)) == 0


def test_not_outside_a_reused_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_REUSE_WORKER", raising=False)
    gc.unfreeze()
    assert freeze_worker_imports() is False
    assert gc.get_freeze_count() == 0


def test_the_option_is_off_unless_set_and_checked() -> None:
    for parse in (parse_read_options, parse_write_options):
        assert parse({"url": URL}).freeze_worker_gc is False
        assert parse({"url": URL, "FreezeWorkerGC": " TRUE "}).freeze_worker_gc is True
        assert parse({"url": URL, "freezeWorkerGc": "false"}).freeze_worker_gc is False
        with pytest.raises(OptionError, match="option 'freezeWorkerGc' must be true or false, got 'yes'"):
            parse({"url": URL, "freezeWorkerGc": "yes"})


def test_frozen_garbage_is_collected_when_the_frozen_objects_are_looked_at_again(reused_worker: None) -> None:
    now = [1_000.0]
    assert freeze_worker_imports(lambda: now[0]) is True
    first, second = Survivor(), Survivor()
    first.other, second.other = second, first  # a cycle: only the collector frees it
    gone = weakref.ref(first)
    assert freeze_worker_imports(lambda: now[0]) is False
    kept = [Survivor() for _ in range(REFREEZE_AT + 1)]  # enough survivors to freeze the cycle with them
    gc.collect()
    assert freeze_worker_imports(lambda: now[0]) is True
    del first, second
    gc.collect()
    assert gone() is not None  # frozen garbage: the collections skip it

    now[0] += REEXAMINE_S - 1
    assert freeze_worker_imports(lambda: now[0]) is False
    gc.collect()
    assert gone() is not None
    now[0] += 1
    assert freeze_worker_imports(lambda: now[0]) is True  # due: unfrozen, collected, frozen again
    assert gone() is None
    assert len(gc.get_objects(generation=2)) == 0
    assert len(kept) == REFREEZE_AT + 1


def test_what_a_parent_froze_stays_frozen_until_the_first_re_examination(
    reused_worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_worker_gc, "_frozen_at", None)  # this process has not frozen yet
    first, second = Survivor(), Survivor()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    gc.freeze()  # as a parent process before forking: shared pages stay untouched by collections
    del first, second
    now = [5_000.0]
    assert freeze_worker_imports(lambda: now[0]) is False  # few survivors of our own; no unfreeze
    assert gone() is not None
    kept = [Survivor() for _ in range(REFREEZE_AT + 1)]
    gc.collect()
    assert freeze_worker_imports(lambda: now[0]) is True  # ours frozen on top
    assert gone() is not None
    now[0] += REEXAMINE_S
    assert freeze_worker_imports(lambda: now[0]) is True
    assert gone() is None
    assert len(kept) == REFREEZE_AT + 1
