"""``minMessagesPerTrigger`` / ``maxTriggerDelay`` decided as Kafka's ``delayBatch``, on a stub clock."""

from __future__ import annotations

from pyspark_durable_streams._source.pacing import Pacing


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_kafkas_rule_the_delay_since_the_last_trigger_then_the_minimum() -> None:
    clock = Clock()
    pacing = Pacing(min_messages=5, max_delay_s=10.0, clock=clock)
    assert not pacing.hold(1)  # the first poll triggers at once
    clock.now = 101
    assert pacing.hold(2)  # below the minimum, within the delay
    assert not pacing.hold(5)  # the minimum is there: runs, the delay counts from now
    clock.now = 110
    assert pacing.hold(4)
    clock.now = 111
    assert not pacing.hold(4)  # the delay has passed: runs with what is there


def test_after_a_long_idle_a_lone_message_waits_and_the_burst_runs() -> None:
    clock = Clock()
    pacing = Pacing(min_messages=5, max_delay_s=10.0, clock=clock)
    assert not pacing.hold(0)
    clock.now = 500  # idle for long: an empty poll past the delay triggers, the delay counts from here
    assert not pacing.hold(0)
    clock.now = 501
    assert pacing.hold(1)  # a lone message waits for company
    clock.now = 502
    assert not pacing.hold(6)  # the burst runs at once
    clock.now = 503
    assert pacing.hold(1)
    clock.now = 512
    assert not pacing.hold(1)  # held no longer than the delay since the burst's batch
