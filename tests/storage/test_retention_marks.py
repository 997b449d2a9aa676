"""A retention policy's marks and cuts (``engine.retention_state``), without a server: where marks
are taken, which one each limit lets go of, the tail of a stream that stopped growing, thinning."""

from __future__ import annotations

from durable_streams_server.engine.retention_state import MAX_MARKS, RetentionState
from durable_streams_server.protocol.retention import RetentionPolicy


def _appended(state: RetentionState, sizes: list[int], ts: list[int]) -> tuple[int, int]:
    """One message per append, of ``sizes[i]`` bytes at ``ts[i]``; returns (tail, bytes)."""
    total, last = 0, 0
    for seq, (size, at) in enumerate(zip(sizes, ts, strict=True)):
        state.note_append(seq, total, last, at)
        total, last = total + size, at
    return len(sizes), total


def test_bytes_keep_at_least_the_limit_and_at_most_one_mark_more() -> None:
    state = RetentionState(RetentionPolicy(max_bytes=800))
    tail, total = _appended(state, [100] * 50, [0] * 50)
    assert [mark[0] for mark in state.marks] == list(range(50))  # (a mark each 100 bytes: an eighth)
    seq, before, _ = state.next_cut(tail, tail, total, 0)  # type: ignore[misc]
    assert total - before == 800 and seq == 42
    state.cut(seq, before)
    assert state.next_cut(tail, tail, total, 0) is None and min(mark[0] for mark in state.marks) > 42


def test_messages_and_age() -> None:
    counted = RetentionState(RetentionPolicy(max_messages=16))
    tail, total = _appended(counted, [1] * 40, [0] * 40)
    assert counted.next_cut(tail, tail, total, 0)[0] == 24  # type: ignore[index]
    aged = RetentionState(RetentionPolicy(max_age_s=8))  # (a mark per second at most)
    tail, total = _appended(aged, [1] * 20, [i * 500 for i in range(20)])
    cut = aged.next_cut(tail, tail, total, now_ms=9_500)
    assert cut is not None and cut[2] <= 9_500 - 8_000 and cut[0] == 4  # (messages 0..3 were appended by 1.5 s)


def test_an_age_limit_lets_go_of_a_stream_that_stopped_growing_at_its_tail_only() -> None:
    state = RetentionState(RetentionPolicy(max_age_s=60, max_messages=1_000))
    tail, total = _appended(state, [10] * 5, [1_000 + i for i in range(5)])
    at_tail = (tail, total, 1_004)
    assert state.next_cut(tail, tail, total, 30_000, at_tail) is None  # (younger than the limit)
    assert state.next_cut(tail, tail, total, 70_000, at_tail) == at_tail
    kept_bytes = RetentionState(RetentionPolicy(max_bytes=1))
    tail, total = _appended(kept_bytes, [10] * 5, [0] * 5)
    assert kept_bytes.next_cut(tail, tail, total, 10**9, (tail, total, 0))[0] == 4  # type: ignore[index]


def test_marks_stay_bounded_and_a_cut_never_passes_the_limit_given() -> None:
    """A stream that outruns maintenance keeps the newest marks dense and the older ones thinned
    (fewer places to cut there, never a wrong one); a cut below a fork's pin or a snapshot
    (``limit``) takes the newest mark at or below it, here none but the current point."""
    state = RetentionState(RetentionPolicy(max_messages=8))
    tail, total = _appended(state, [1] * 1_000, [0] * 1_000)
    assert len(state.marks) <= MAX_MARKS
    assert [mark[0] for mark in state.marks[-40:]] == list(range(960, 1_000))
    assert state.next_cut(tail, tail, total, 0)[0] == 992  # type: ignore[index]
    assert state.next_cut(951, tail, total, 0)[0] == 950  # type: ignore[index]
    assert state.next_cut(500, tail, total, 0) is None  # (mark 0 is the current point)


def test_a_new_policy_marks_the_tail_and_an_empty_one_drops_the_marks() -> None:
    state = RetentionState(RetentionPolicy())
    _appended(state, [5] * 10, [0] * 10)
    assert state.marks == []  # (no policy: no marks)
    state.change(RetentionPolicy(max_messages=2), 10, 50, 7)
    assert state.marks == [(10, 50, 7)]
    state.change(RetentionPolicy(), 10, 50, 8)
    assert state.marks == []
