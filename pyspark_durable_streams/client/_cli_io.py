"""Input and output of the ``durable-streams`` command line.

* Appending ``--json-lines`` validates the whole input before the first request: a bad line
  fails the command naming its number, and nothing is appended. Seekable input is read twice;
  a pipe is spooled (in memory up to ``_SPOOL_MEMORY_BYTES``, then to a temporary file).
* Progress bars are ``tqdm`` on stderr, shown only when stderr is a terminal (or forced with
  ``--progress``), so pipes and logs stay clean.
* ``tail`` without an offset starts ``n`` messages before the end, like tail(1): on servers
  whose offsets are ``SSSS_BBBB`` sequence offsets (ours) that is one computed offset; on
  others the history is read and only the last ``n`` messages are kept.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO, BinaryIO, Protocol

from tqdm import tqdm  # type: ignore[import-untyped]  # tqdm ships no type information

from .models import Message, is_json
from .reading import BEGINNING
from .stream import Stream

_PROGRESS_MIN_BYTES = 1024 * 1024
_SPOOL_MEMORY_BYTES = 64 * 1024 * 1024
_SEQ_OFFSET = re.compile(r"^(\d{16})_(\d{16})$")


class ProgressBar(Protocol):
    """The part of ``tqdm`` used here (tqdm ships without type information)."""

    def update(self, n: float = 1) -> bool | None: ...

    def __enter__(self) -> ProgressBar: ...

    def __exit__(self, *exc: object) -> None: ...


class BadInput(Exception):
    """The input cannot be appended as given; nothing was sent."""


def validated_json_lines(source: BinaryIO) -> IO[bytes]:
    """``source`` checked to hold one JSON value per non-empty line, positioned at its start.

    Raises ``BadInput`` naming the first bad line before anything is appended.
    """
    if _seekable(source):
        _check_lines(source)
        source.seek(0)
        return source
    spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_MEMORY_BYTES)  # noqa: SIM115  # returned open
    try:
        _check_lines(source, copy_to=spool)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool


def _seekable(source: BinaryIO) -> bool:
    try:
        return source.seekable() and source.tell() == 0
    except (OSError, ValueError):
        return False


def _check_lines(source: IO[bytes], copy_to: IO[bytes] | None = None) -> None:
    for number, line in enumerate(source, start=1):
        if copy_to is not None:
            copy_to.write(line)
        if line.strip():
            try:
                json.loads(line)
            except ValueError as exc:
                raise BadInput(f"line {number} is not JSON ({exc}); nothing was appended") from None


def json_lines(source: IO[bytes]) -> Iterator[bytes]:
    """The non-empty lines of validated input."""
    for line in source:
        if line.strip():
            yield line


def chunks(source: BinaryIO, size: int, *, at_line_ends: bool = False) -> Iterator[bytes]:
    """``source`` in chunks of at most ``size`` bytes; ``at_line_ends`` (a text stream, whose
    readers take each message as a row): each ending with a line's end, but for a line longer
    than ``size``, which is cut into chunks of ``size``."""
    carried = b""
    while block := source.read(size - len(carried)):
        chunk, carried = carried + block, b""
        if at_line_ends and len(chunk) == size:
            end = chunk.rfind(b"\n") + 1
            if end:  # (no line end in it: a line longer than a chunk, cut)
                chunk, carried = chunk[:end], chunk[end:]
        yield chunk
    if carried:
        yield carried


def count(text: str) -> int:
    """An argument that counts something: a whole number, 0 or more."""
    return _whole(text, 0)


def positive(text: str) -> int:
    """An argument that must be a whole number greater than 0."""
    return _whole(text, 1)


def _whole(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {least} or more, got {value}")
    return value


def plural(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def upload_progress(source: BinaryIO, enabled: bool | None) -> ProgressBar:
    """Bytes sent; by default shown on a terminal for inputs of at least 1 MiB (or of unknown size)."""
    try:
        total: int | None = os.fstat(source.fileno()).st_size or None
    except (OSError, ValueError):
        total = None
    if enabled is None and total is not None and total < _PROGRESS_MIN_BYTES:
        enabled = False
    return _bar(total=total, unit="B", unit_scale=True, enabled=enabled)


def read_progress(stream: Stream, offset: str, enabled: bool | None) -> ProgressBar:
    """Messages read, out of those between ``offset`` and the tail where offsets tell (our server)."""
    total = None
    if enabled is not False and (enabled or sys.stderr.isatty()):
        total = messages_between(offset, stream.metadata().next_offset)
    return _bar(total=total, unit="msg", unit_scale=False, enabled=enabled)


def _bar(*, total: int | None, unit: str, unit_scale: bool, enabled: bool | None) -> ProgressBar:
    # disable=None lets tqdm decide: shown when stderr is a terminal, silent in pipes and logs.
    bar: ProgressBar = tqdm(
        total=total, unit=unit, unit_scale=unit_scale, file=sys.stderr, disable=None if enabled is None else not enabled
    )
    return bar


def messages_between(start: str, end: str) -> int | None:
    """How many messages lie between two offsets, where both are sequence offsets (else None)."""
    if start == BEGINNING:
        start = "0" * 16 + "_" + "0" * 16
    first, last = _SEQ_OFFSET.match(start), _SEQ_OFFSET.match(end)
    if first is None or last is None:
        return None
    return max(0, int(last.group(1)) - int(first.group(1)))


def last_messages_offset(stream: Stream, count: int) -> str | None:
    """The offset ``count`` messages before the tail, if the server's offsets are sequence offsets."""
    match = _SEQ_OFFSET.match(stream.metadata().next_offset)
    if match is None:
        return None
    return f"{max(0, int(match.group(1)) - count):016d}_{0:016d}"


def last_of(messages: Iterable[Message], count: int) -> list[Message]:
    return list(collections.deque(messages, maxlen=count)) if count else []


def write_messages(
    messages: Iterable[Message], *, flush_each: bool = False, progress: ProgressBar | None = None
) -> None:
    """JSON messages as one compact JSON value per line; other messages' bytes as stored."""
    out = sys.stdout.buffer
    for message in messages:
        if is_json(message.content_type):
            out.write(json.dumps(message.json(), separators=(",", ":")).encode("utf-8") + b"\n")
        else:
            out.write(message.data)
        if flush_each:
            out.flush()
        if progress is not None:
            progress.update(1)
    out.flush()


def open_in(path: str | None) -> contextlib.AbstractContextManager[BinaryIO]:
    return open(path, "rb") if path and path != "-" else contextlib.nullcontext(sys.stdin.buffer)


def write_file(path: str | None, data: bytes) -> None:
    if path and path != "-":
        with open(path, "wb") as target:
            target.write(data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
