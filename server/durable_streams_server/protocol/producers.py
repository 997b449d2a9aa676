"""The idempotent-producer state machine (spec section 5.2.1), as pure functions.

Theory of operation
-------------------
Each stream keeps, per ``Producer-Id``, the highest epoch seen and the last sequence
number accepted in that epoch. A request carrying ``(id, epoch, seq)`` is judged against
that state before anything is appended:

* epoch below the stored one        -> ``Fenced`` (403, tells the current epoch)
* epoch above the stored one        -> accepted only at ``seq == 0`` (else 400); the
                                        epoch becomes current
* same epoch, ``seq <= last``       -> ``Duplicate`` (204: the data is already stored)
* same epoch, ``seq == last + 1``   -> ``Accepted``
* same epoch, ``seq > last + 1``    -> ``Gap`` (409, expected and received seq)
* unknown producer                  -> accepted only at ``seq == 0`` (else a gap)

The decision is returned as a value; the engine applies ``Accepted.state`` in the same
step as the append, so that data and producer state are never stored apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import BadRequest, Conflict, Forbidden
from .headers import PRODUCER_EPOCH, PRODUCER_EXPECTED_SEQ, PRODUCER_RECEIVED_SEQ, ProducerHeaders


@dataclass(frozen=True, slots=True)
class ProducerState:
    epoch: int
    last_seq: int


@dataclass(frozen=True, slots=True)
class Accepted:
    state: ProducerState


@dataclass(frozen=True, slots=True)
class Duplicate:
    last_seq: int


@dataclass(frozen=True, slots=True)
class Fenced:
    current_epoch: int


@dataclass(frozen=True, slots=True)
class EpochMustStartAtZero:
    pass


@dataclass(frozen=True, slots=True)
class Gap:
    expected_seq: int
    received_seq: int


Decision = Accepted | Duplicate | Fenced | EpochMustStartAtZero | Gap


def decide(current: ProducerState | None, request: ProducerHeaders) -> Decision:
    epoch, seq = request.epoch, request.seq
    if current is None:
        if seq != 0:
            return Gap(expected_seq=0, received_seq=seq)
        return Accepted(ProducerState(epoch, 0))
    if epoch < current.epoch:
        return Fenced(current.epoch)
    if epoch > current.epoch:
        if seq != 0:
            return EpochMustStartAtZero()
        return Accepted(ProducerState(epoch, 0))
    if seq <= current.last_seq:
        return Duplicate(current.last_seq)
    if seq == current.last_seq + 1:
        return Accepted(ProducerState(epoch, seq))
    return Gap(expected_seq=current.last_seq + 1, received_seq=seq)


def admit(current: ProducerState | None, request: ProducerHeaders) -> ProducerState | Duplicate:
    """``decide``, with the refusals raised as the protocol errors (and headers) they answer."""
    decision = decide(current, request)
    if isinstance(decision, Accepted):
        return decision.state
    if isinstance(decision, Duplicate):
        return decision
    if isinstance(decision, Fenced):
        raise Forbidden(
            "stale producer epoch", code="STALE_EPOCH", headers={PRODUCER_EPOCH: str(decision.current_epoch)}
        )
    if isinstance(decision, EpochMustStartAtZero):
        raise BadRequest("a new producer epoch must start at Producer-Seq 0", code="INVALID_EPOCH_SEQ")
    raise Conflict(
        "producer sequence gap",
        code="SEQUENCE_GAP",
        headers={PRODUCER_EXPECTED_SEQ: str(decision.expected_seq), PRODUCER_RECEIVED_SEQ: str(decision.received_seq)},
    )
