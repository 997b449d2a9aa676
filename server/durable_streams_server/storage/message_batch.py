"""A bulk append's messages as Arrow buffers: one values buffer and its offsets.

A ``MessageBatch`` is what a record of a bulk append carries instead of one ``bytes`` per
message. It is a ``Sequence[bytes]`` (indexing makes a ``bytes`` of one message), so the
code that treats messages one by one keeps working, while the paths that move many
messages use the buffers directly: the WAL frame writes the offsets and the values as two
blocks (``frame_parts`` / ``from_frame``), the Delta flush puts ``array`` into the commit's
``data`` column as it is, and the memory tail takes its messages in one conversion.

Whether a record's messages are a batch is asked on every append's path; it is asked as
``type(messages) is MessageBatch`` (the class is final): ``isinstance`` against an abstract
``Sequence`` goes through ``ABCMeta``'s checks, which cost more than the rest of the test.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import final, overload

import numpy as np
import pyarrow as pa


@final
class MessageBatch(Sequence[bytes]):
    __slots__ = ("array", "nbytes")

    def __init__(self, array: pa.BinaryArray) -> None:
        self.array = array
        self.nbytes = value_bytes(array)

    def __len__(self) -> int:
        return len(self.array)

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self.array))
            if step != 1:
                return self.list()[index]
            return MessageBatch(self.array.slice(start, max(0, stop - start)))
        value = self.array[index].as_py()
        assert isinstance(value, bytes)
        return value

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.list())

    def __repr__(self) -> str:
        return f"MessageBatch({len(self)} messages, {self.nbytes} bytes)"

    def list(self) -> list[bytes]:
        """One ``bytes`` per message (one C-level conversion)."""
        values: list[bytes] = self.array.to_pylist()
        return values

    def sizes(self) -> np.ndarray:
        """Each message's length."""
        return np.diff(_offsets(self.array))

    def values(self) -> memoryview:
        """The messages' bytes end to end: a view of the values buffer, no copy."""
        return _values(self.array, int(_offsets(self.array)[0]), self.nbytes)

    def offsets(self) -> np.ndarray:
        """Where each message starts in ``values()`` (count + 1 of them, from 0)."""
        offsets = _offsets(self.array)
        relative: np.ndarray = offsets - offsets[0]
        return relative

    def frame_parts(self) -> tuple[bytes, memoryview]:
        """The offsets (``u32`` * (count + 1), from 0) and the values, for a WAL frame."""
        return self.offsets().astype("<u4", copy=False).tobytes(), self.values()

    @classmethod
    def from_frame(cls, count: int, offsets: bytes | memoryview, values: bytes | memoryview) -> MessageBatch:
        """The inverse of ``frame_parts`` (the buffers are copied out of the frame once)."""
        array = pa.Array.from_buffers(
            pa.binary(), count, [None, pa.py_buffer(bytes(offsets)), pa.py_buffer(bytes(values))]
        )
        assert isinstance(array, pa.BinaryArray)
        return cls(array)


_SPANNED = (pa.binary(), pa.large_binary())


def value_bytes(data: pa.ChunkedArray | pa.Array) -> int:
    """The bytes of a binary column's messages end to end: each chunk's span of its values buffer
    (``total_values_length``, what its offsets address; a slice's own), without a compute kernel
    (~0.5 µs for a short column; ``binary_length`` and a sum, ~5-18 µs). Another type (a view
    type a file may hold) is cast to ``large_binary`` first."""
    total = 0
    for chunk in data.chunks if isinstance(data, pa.ChunkedArray) else [data]:
        spanned = chunk if chunk.type in _SPANNED else chunk.cast(pa.large_binary())
        total += spanned.total_values_length
    return total


def _values(array: pa.BinaryArray, base: int, nbytes: int) -> memoryview:
    values = array.buffers()[2]
    return memoryview(values)[base : base + nbytes] if values is not None else memoryview(b"")


def _offsets(array: pa.BinaryArray) -> np.ndarray:
    buffer = array.buffers()[1]
    if buffer is None:
        return np.zeros(1, dtype=np.int32)
    return np.frombuffer(buffer, dtype=np.int32, count=len(array) + 1, offset=array.offset * 4)
