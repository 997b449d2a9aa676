"""The memory guard's control loop, driven step by step with a given RSS (the process's own
RSS drives it in ``test_memory_budget.py``'s server test)."""

from __future__ import annotations

from durable_streams_server.engine.memory import MemoryBudget
from durable_streams_server.engine.memory_guard import MemoryGuard, process_rss

MIB = 1024 * 1024


class _Process:
    """RSS = start size + what the budget holds + work outside it."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        self.start = 200 * MIB
        self.work = 0

    def rss(self) -> int:
        return self.start + self.budget.used + self.work


def _guarded(window: int = 3) -> tuple[MemoryBudget, _Process, MemoryGuard, list[str]]:
    released: list[str] = []
    memory = MemoryBudget(448 * MIB)
    process = _Process(memory)
    guard = MemoryGuard(memory, 512 * MIB, window=window, rss=process.rss, release=lambda: released.append("trim"))
    guard.sample()  # the baseline
    for index in range(8):  # 8 tails of 50 MiB: 400 MiB held
        memory.hold(("tail", index), 50 * MIB, lambda _, index=index: released.append(f"tail {index}"))  # type: ignore[misc]
    return memory, process, guard, released


def test_work_outside_the_budget_shrinks_the_caches_oldest_first() -> None:
    memory, process, guard, released = _guarded()
    assert not guard.sample() and memory.limit == 448 * MIB  # 400 held + 0 outside: fits
    process.work = 150 * MIB
    assert guard.sample()
    assert guard.outside == 150 * MIB
    assert memory.limit == 362 * MIB and memory.held == 350 * MIB
    assert released == ["tail 0"]
    assert process.rss() - process.start <= 512 * MIB


def test_the_allowance_comes_back_once_the_window_has_passed() -> None:
    memory, process, guard, _ = _guarded(window=3)
    process.work = 150 * MIB
    guard.sample()
    process.work = 0
    guard.sample()
    guard.sample()
    assert memory.limit == 362 * MIB  # the burst is still in the window
    guard.sample()
    assert memory.limit == 448 * MIB  # never more than configured


def test_the_caches_keep_their_floor_whatever_the_work() -> None:
    memory, process, guard, released = _guarded()
    process.work = 2048 * MIB
    guard.sample()
    assert memory.limit == 64 * MIB  # an eighth of the budget
    assert memory.held <= 64 * MIB and len([r for r in released if r.startswith("tail")]) == 7


def test_the_baseline_is_the_lowest_size_outside_the_budget() -> None:
    memory, process, guard, _ = _guarded()
    process.start -= 30 * MIB  # start-up's transient memory handed back
    guard.sample()
    assert guard.outside == 0 and guard.baseline == 170 * MIB
    process.work = 100 * MIB
    guard.sample()
    assert guard.outside == 100 * MIB and memory.limit == 412 * MIB


def test_the_rss_of_this_process_is_read() -> None:
    assert process_rss() > 10 * MIB
