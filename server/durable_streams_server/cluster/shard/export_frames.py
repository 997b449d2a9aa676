"""The framing of a fork export: what a stream's shard sends the shard of a fork of it (pure).

A fork whose source lives in another shard of a cluster is a copy (copy-on-fork, which the
protocol allows): the fork's shard server asks the source's for an *export* and stores what
it gets as the fork's own messages, at the source's own sequence numbers. The export is one
response body of frames, each ``kind (1 byte) | length (4 bytes, big-endian) | payload``:

* ``M`` once, first: JSON of the source's configuration and the resolved fork point
  (``engine.copied_forks.ExportMeta``);
* ``P`` at most once: the prefix a binary sub-offset keeps of the message at the fork point
  (it becomes the fork's first own message);
* ``D`` per inherited message, in order, from the source's earliest retained message up to
  the fork point;
* ``E`` once, last: JSON ``{"messages": n}``, the count of ``D`` frames. A body without it
  was cut short (the source's server or the relay failed) and is never used.

``ExportReader`` parses a body fed in chunks of any size, keeping at most ``max_bytes`` of
message data (``ForkTooLarge`` past it), so a fork's server holds a bounded copy.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import asdict

from ...engine.copied_forks import ExportMeta
from ...protocol.errors import Conflict

CONTENT_TYPE = "application/vnd.durable-streams.fork-export"
_HEAD = struct.Struct(">cI")
META, PREFIX, DATA, END = b"M", b"P", b"D", b"E"


class ForkTooLarge(Conflict):
    default_code = "FORK_TOO_LARGE"


def too_large(max_bytes: int) -> ForkTooLarge:
    return ForkTooLarge(
        f"the fork would copy more than {max_bytes} bytes from its source's shard "
        "(--cross-shard-fork-max-bytes); give the fork its source's shard key (first path segment, "
        "or bucket) to fork without a copy"
    )


def frame(kind: bytes, payload: bytes) -> bytes:
    return _HEAD.pack(kind, len(payload)) + payload


def meta_frame(meta: ExportMeta) -> bytes:
    return frame(META, json.dumps(asdict(meta)).encode())


def end_frame(messages: int) -> bytes:
    return frame(END, json.dumps({"messages": messages}).encode())


def message_frames(messages: list[bytes]) -> Iterator[bytes]:
    for message in messages:
        yield _HEAD.pack(DATA, len(message))
        yield message


class MalformedExport(ValueError):
    """The body is not a whole export (cut short, or not one at all)."""


class ExportReader:
    """An export parsed from chunks (module docstring)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.meta: ExportMeta | None = None
        self.prefix: bytes | None = None
        self.messages: list[bytes] = []
        self.complete = False
        self._held = 0
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        while len(self._buffer) >= _HEAD.size:
            kind, length = _HEAD.unpack_from(self._buffer)
            if kind in (DATA, PREFIX) and self._held + length > self.max_bytes:
                raise too_large(self.max_bytes)
            if len(self._buffer) < _HEAD.size + length:
                return
            payload = bytes(self._buffer[_HEAD.size : _HEAD.size + length])
            del self._buffer[: _HEAD.size + length]
            self._take(kind, payload)

    def _take(self, kind: bytes, payload: bytes) -> None:
        if self.complete or (self.meta is None) != (kind == META):
            raise MalformedExport(f"unexpected frame {kind!r}")
        if kind == META:
            self.meta = ExportMeta(**json.loads(payload))
        elif kind == PREFIX:
            self.prefix = payload
            self._held += len(payload)
        elif kind == DATA:
            self.messages.append(payload)
            self._held += len(payload)
        elif kind == END:
            if json.loads(payload).get("messages") != len(self.messages):
                raise MalformedExport("the export's message count does not match its messages")
            self.complete = True
        else:
            raise MalformedExport(f"unknown frame {kind!r}")

    def finish(self) -> tuple[ExportMeta, bytes | None, list[bytes]]:
        if not self.complete or self.meta is None or self._buffer:
            raise MalformedExport("the export was cut short")
        return self.meta, self.prefix, self.messages
