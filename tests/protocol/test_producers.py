"""The idempotent-producer state machine (spec section 5.2.1)."""

from __future__ import annotations

import random

import pytest

from durable_streams_server.protocol.headers import ProducerHeaders
from durable_streams_server.protocol.producers import (
    Accepted,
    Decision,
    Duplicate,
    EpochMustStartAtZero,
    Fenced,
    Gap,
    ProducerState,
    decide,
)


def req(epoch: int, seq: int) -> ProducerHeaders:
    return ProducerHeaders("producer-1", epoch, seq)


def test_unknown_producer_accepted_at_seq_zero() -> None:
    assert decide(None, req(0, 0)) == Accepted(ProducerState(0, 0))
    assert decide(None, req(7, 0)) == Accepted(ProducerState(7, 0))


@pytest.mark.parametrize("seq", [1, 2, 1000])
def test_unknown_producer_nonzero_seq_is_gap(seq: int) -> None:
    assert decide(None, req(0, seq)) == Gap(expected_seq=0, received_seq=seq)
    assert decide(None, req(3, seq)) == Gap(expected_seq=0, received_seq=seq)


@pytest.mark.parametrize(("epoch", "seq"), [(0, 0), (0, 99), (4, 0), (4, 6)])
def test_stale_epoch_is_fenced(epoch: int, seq: int) -> None:
    assert decide(ProducerState(epoch=5, last_seq=5), req(epoch, seq)) == Fenced(current_epoch=5)


def test_newer_epoch_at_zero_is_accepted_and_resets_seq() -> None:
    current = ProducerState(epoch=2, last_seq=40)
    assert decide(current, req(3, 0)) == Accepted(ProducerState(3, 0))
    assert decide(current, req(100, 0)) == Accepted(ProducerState(100, 0))


@pytest.mark.parametrize("seq", [1, 40, 41, 500])
def test_newer_epoch_must_start_at_zero(seq: int) -> None:
    assert decide(ProducerState(epoch=2, last_seq=40), req(3, seq)) == EpochMustStartAtZero()


@pytest.mark.parametrize("seq", [0, 1, 9, 10])
def test_same_epoch_seq_at_or_below_last_is_duplicate(seq: int) -> None:
    assert decide(ProducerState(epoch=1, last_seq=10), req(1, seq)) == Duplicate(last_seq=10)


def test_same_epoch_next_seq_is_accepted() -> None:
    assert decide(ProducerState(epoch=1, last_seq=10), req(1, 11)) == Accepted(ProducerState(1, 11))
    assert decide(ProducerState(epoch=0, last_seq=0), req(0, 1)) == Accepted(ProducerState(0, 1))


@pytest.mark.parametrize("seq", [12, 13, 2**53 - 1])
def test_same_epoch_skipped_seq_is_gap(seq: int) -> None:
    assert decide(ProducerState(epoch=1, last_seq=10), req(1, seq)) == Gap(expected_seq=11, received_seq=seq)


def test_decide_is_pure() -> None:
    current = ProducerState(epoch=1, last_seq=3)
    first = decide(current, req(1, 4))
    assert decide(current, req(1, 4)) == first
    assert current == ProducerState(epoch=1, last_seq=3)


def _random_request(rng: random.Random, state: ProducerState | None) -> ProducerHeaders:
    epoch = state.epoch if state else 0
    last = state.last_seq if state else -1
    epoch = max(0, epoch + rng.choice([-2, -1, 0, 0, 0, 0, 1, 1, 3]))
    seq = max(0, rng.choice([0, 0, last, last + 1, last + 1, last + 1, last + 2, last - 1, rng.randint(0, last + 5)]))
    return req(epoch, seq)


@pytest.mark.parametrize("seed", range(40))
def test_random_sequences_accept_only_contiguous_seqs(seed: int) -> None:
    rng = random.Random(seed)
    state: ProducerState | None = None
    accepted_per_epoch: dict[int, list[int]] = {}
    kinds: set[type] = set()
    for _ in range(400):
        request = _random_request(rng, state)
        decision: Decision = decide(state, request)
        kinds.add(type(decision))
        if isinstance(decision, Accepted):
            if state is not None and request.epoch == state.epoch:
                assert request.seq == state.last_seq + 1
            else:
                assert request.seq == 0
                assert state is None or request.epoch > state.epoch
            assert decision.state == ProducerState(request.epoch, request.seq)
            accepted_per_epoch.setdefault(request.epoch, []).append(request.seq)
            state = decision.state
        elif isinstance(decision, Duplicate):
            assert state is not None and request.epoch == state.epoch and request.seq <= state.last_seq
        elif isinstance(decision, Fenced):
            assert state is not None and request.epoch < state.epoch == decision.current_epoch
        elif isinstance(decision, EpochMustStartAtZero):
            assert state is not None and request.epoch > state.epoch and request.seq != 0
        else:
            assert isinstance(decision, Gap)
            expected = state.last_seq + 1 if state else 0
            assert decision == Gap(expected_seq=expected, received_seq=request.seq)
            assert request.seq > expected
    # Each epoch's accepted seqs are exactly 0, 1, 2, ... and epochs only move forward.
    for seqs in accepted_per_epoch.values():
        assert seqs == list(range(len(seqs)))
    assert list(accepted_per_epoch) == sorted(accepted_per_epoch)
    assert {Accepted, Duplicate, Gap}.issubset(kinds)
