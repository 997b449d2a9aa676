"""Trigger shaping: ``minMessagesPerTrigger`` with ``maxTriggerDelay`` (Kafka's
``minOffsetsPerTrigger`` / ``maxTriggerDelay``).

Kafka's rule, at every poll: once ``maxTriggerDelay`` has passed since the last trigger, the
poll triggers (a batch runs with what is there, none if nothing is) and the delay counts
from now; before that, a batch is held back while fewer than the minimum messages are
waiting, and runs (counting from now) once they are. So an idle query keeps triggering
empty polls: after a long idle, a lone message waits for company (up to the delay) instead
of running alone and holding the burst that follows for the whole delay. The first poll
of a query triggers at once (as Kafka's), and ``Trigger.AvailableNow`` reads everything up
to its target whatever the minimum (the caller does not ask). ``maxMessagesPerTrigger`` /
``maxBytesPerTrigger`` still cap a batch that runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class Pacing:
    def __init__(self, min_messages: int, max_delay_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.min_messages = min_messages
        self.max_delay_s = max_delay_s
        self._clock = clock
        self._last_batch = -math.inf

    def hold(self, pending: int) -> bool:
        """Whether to hold the next batch back, ``pending`` messages waiting (at least that
        many: a caller may stop counting at the minimum). A poll that is not held counts as a
        trigger from now."""
        now = self._clock()
        if now - self._last_batch < self.max_delay_s and pending < self.min_messages:
            return True
        self._last_batch = now
        return False
