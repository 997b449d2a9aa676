"""Offset tokens: ``SSSSSSSSSSSSSSSS_BBBBBBBBBBBBBBBB``.

The first field is the message sequence number within the stream, the second a byte
position inside that message. Both are zero-padded to a fixed width so that string order
is stream order, which is what the protocol promises clients. A position at a message
boundary always has ``B == 0``: the end of message ``n`` is written as the start of
message ``n + 1`` so that every position has exactly one spelling.

Carrying the message sequence (rather than a global byte count) lets consumers such as
the Spark source split a range into partitions by message count without asking the
server, while the byte field lets one large message be read in bounded chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import BadRequest

_WIDTH = 16

BEGINNING_SENTINEL = "-1"
NOW_SENTINEL = "now"


@dataclass(frozen=True, order=True, slots=True)
class Offset:
    """A position in a stream: message ``seq``, byte ``within`` that message."""

    seq: int
    within: int = 0

    def encode(self) -> str:
        return f"{self.seq:016d}_{self.within:016d}"

    def __str__(self) -> str:
        return self.encode()


ZERO = Offset(0, 0)


def encode_seq(seq: int) -> str:
    """The token of the boundary before message ``seq`` (hot path: no object)."""
    return f"{seq:016d}_0000000000000000"


MALFORMED = (
    "; an offset is -1 (the start), now (the tail), or a token from Stream-Next-Offset: "
    "two 16-digit numbers joined by '_' (0000000000000000_0000000000000000)"
)


def parse_offset(token: str) -> Offset:
    """Parse a concrete offset token (not a sentinel); raise ``BadRequest`` if malformed."""
    if len(token) != 2 * _WIDTH + 1 or token[_WIDTH] != "_":
        raise BadRequest(f"malformed offset {token!r}{MALFORMED}", code="INVALID_OFFSET")
    seq_part, within_part = token[:_WIDTH], token[_WIDTH + 1 :]
    if not (seq_part.isdigit() and within_part.isdigit() and seq_part.isascii() and within_part.isascii()):
        raise BadRequest(f"malformed offset {token!r}{MALFORMED}", code="INVALID_OFFSET")
    return Offset(int(seq_part), int(within_part))
