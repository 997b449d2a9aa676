"""``history_rows.within_budget``: how many leading messages a read takes from a run it read; and
``message_batch.value_bytes``, the bytes of a column's messages, which it and the runs count with.

A message is taken while budget remains before it (so a first message larger than the budget is
taken when the read must take one), and its bytes count. Checked against that rule written out
in Python, over chunked and sliced columns (the fast answer when the whole column fits, from the
bytes its offsets address, and the kernels' answer otherwise must both follow it).
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from durable_streams_server.storage.history_rows import within_budget
from durable_streams_server.storage.message_batch import MessageBatch, value_bytes


def _expected(sizes: list[int], budget: int, at_least_one: bool) -> tuple[int, int]:
    kept, start = 0, 0
    for size in sizes:
        if start >= budget:
            break
        kept, start = kept + 1, start + size
    if at_least_one and not kept and sizes:
        return 1, sizes[0]
    return kept, start


@given(
    chunks=st.lists(st.lists(st.integers(0, 300), max_size=6), min_size=1, max_size=4),
    cut=st.tuples(st.integers(0, 5), st.integers(0, 30)),
    budget=st.integers(1, 2000),
    at_least_one=st.booleans(),
)
def test_the_messages_taken_are_those_with_budget_left_before_them(
    chunks: list[list[int]], cut: tuple[int, int], budget: int, at_least_one: bool
) -> None:
    column = pa.chunked_array([pa.array([b"x" * size for size in sizes], pa.binary()) for sizes in chunks], pa.binary())
    sizes = [size for chunk in chunks for size in chunk]
    offset = min(cut[0], len(sizes))
    column, sizes = column.slice(offset, cut[1]), sizes[offset : offset + cut[1]]
    if not sizes:
        return  # (a read never asks of an empty run)
    assert within_budget(column, budget, at_least_one=at_least_one) == _expected(sizes, budget, at_least_one)


def test_a_column_that_fits_is_taken_whole_with_its_bytes() -> None:
    column = pa.chunked_array([pa.array([b"abc", b"", b"de"]), pa.array([b"f" * 10])]).slice(1)
    assert within_budget(column, 13, at_least_one=False) == (3, 12)
    assert within_budget(column, 12, at_least_one=False) == (3, 12)  # (the last one starts at 2 < 12)
    assert within_budget(column, 2, at_least_one=False) == (2, 2)  # (the third starts at 2: none left)


@given(
    chunks=st.lists(st.lists(st.integers(0, 300), max_size=6), min_size=1, max_size=4),
    cut=st.tuples(st.integers(0, 5), st.integers(0, 30)),
    kind=st.sampled_from([pa.binary(), pa.large_binary(), pa.binary_view()]),
)
def test_value_bytes_are_the_messages_bytes_of_any_slice(
    chunks: list[list[int]], cut: tuple[int, int], kind: pa.DataType
) -> None:
    column = pa.chunked_array([pa.array([b"y" * size for size in sizes], kind) for sizes in chunks], kind)
    sizes = [size for chunk in chunks for size in chunk]
    column, sizes = column.slice(cut[0], cut[1]), sizes[cut[0] : cut[0] + cut[1]]
    assert value_bytes(column) == sum(sizes)
    for chunk in column.chunks:
        assert value_bytes(chunk) == sum(len(value) for value in chunk.to_pylist())
        if kind == pa.binary():
            assert MessageBatch(chunk).nbytes == len(MessageBatch(chunk).values())
