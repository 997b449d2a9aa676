"""Conditional appends (extension; upstream's proposal, durable-streams PR #243, after RFC 9110's
``If-Match`` and S3's conditional writes): an append that is stored only if the stream's tail is
the one its writer last saw.

``If-Match: "<offset>"`` on a POST compares the stream's tail (the ``Stream-Next-Offset`` a HEAD
gives once the appends before are durable) with the quoted offset. Equal: the append proceeds,
and its answer carries ``ETag: "<new tail>"``, so a writer chains its next conditional append
without a HEAD. Not equal: ``412 PRECONDITION_FAILED``, ``ETag: "<current tail>"`` and
``Stream-Next-Offset: <current tail>``, nothing stored. Refused with ``400 INVALID_PRECONDITION``:
``If-Match: *`` (not supported: a POST to a stream that does not exist is a 404 anyway), anything
but one quoted offset (lists, weak tags, unquoted tokens), and ``If-Match`` with the
idempotent-producer headers (two retry schemes that contradict each other).

Evaluation order (``engine.appending.admit_append``; tests/server/test_conditional_appends.py checks each
step against the next):

1. the stream exists: ``404`` (``410`` soft-deleted);
2. the stream is closed: ``409 STREAM_CLOSED`` with ``Stream-Closed`` and the final offset, as
   without a precondition; a repeated close-only request (empty body, ``Stream-Closed: true``)
   still answers ``204`` as the protocol's idempotent close does (with the ``ETag`` of the final
   tail): the state it asks for holds, whatever tail its writer saw;
3. the precondition is malformed or unsupported: ``400 INVALID_PRECONDITION``;
4. the content type (``409 CONTENT_TYPE_MISMATCH``) and ``Stream-Seq`` (``409
   SEQUENCE_REGRESSION``), as today;
5. the precondition: ``412 PRECONDITION_FAILED``;
6. the append, and with ``Stream-Closed: true`` the close: the close is part of the conditional
   step (a failed precondition neither appends nor closes; a close-only request with ``If-Match``
   closes only a stream whose tail is the one named).

The HTTP layer's own 400s come before all of these, as for any append: an empty body without
``Stream-Closed: true``, a missing ``Content-Type``, malformed producer headers (and a bulk
append's malformed body). Steps 2-6 run in the engine's one synchronous step per append, so no
other append can move the tail between the comparison and the write.

Pure: no I/O; the engine calls ``parse`` and ``check``.
"""

from __future__ import annotations

import re

from .errors import BadRequest, PreconditionFailed
from .offsets import Offset, encode_seq, parse_offset

IF_MATCH = "If-Match"
CONDITIONAL_APPEND = "Stream-Conditional-Append"
"""Response header (HEAD): the preconditions this server evaluates on appends (``If-Match``)."""

_QUOTED_RE = re.compile(r'"([^"]*)"')


def parse(raw: str, *, producer: bool) -> Offset:
    """The offset an ``If-Match`` header names; ``BadRequest`` for any other value, for ``*``, and
    with producer headers (``producer``)."""
    if producer:
        raise BadRequest(
            "If-Match cannot be combined with Producer-Id/Producer-Epoch/Producer-Seq", code="INVALID_PRECONDITION"
        )
    value = raw.strip()
    if value == "*":
        raise BadRequest(
            'If-Match: * is not supported on appends; name the tail offset: If-Match: "<Stream-Next-Offset>"',
            code="INVALID_PRECONDITION",
        )
    match = _QUOTED_RE.fullmatch(value)
    if match is None:
        raise BadRequest(
            f'invalid If-Match {raw!r}: expected one quoted offset, "<Stream-Next-Offset>"', code="INVALID_PRECONDITION"
        )
    try:
        return parse_offset(match.group(1))
    except BadRequest as exc:
        raise BadRequest(f"invalid If-Match {raw!r}: {exc.message}", code="INVALID_PRECONDITION") from exc


def check(expected: Offset, tail: int) -> None:
    """``PreconditionFailed`` unless ``expected`` is the tail (message boundary ``tail``)."""
    if expected != Offset(tail):
        current = encode_seq(tail)
        raise PreconditionFailed(
            f"If-Match named offset {expected.encode()}, but the stream's tail is {current}",
            headers={"ETag": etag(tail), "Stream-Next-Offset": current},
        )


def etag(tail: int) -> str:
    """The ``ETag`` of a stream whose tail is message boundary ``tail``: its offset, quoted."""
    return f'"{encode_seq(tail)}"'
