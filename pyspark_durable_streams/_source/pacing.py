"""Trigger shaping: ``minMessagesPerTrigger`` with ``maxTriggerDelay`` (Kafka's
``minOffsetsPerTrigger`` / ``maxTriggerDelay``).

A micro-batch is held back while fewer than the minimum messages are waiting, but never
for longer than the delay since the last batch that ran: once the delay has passed, the
next poll that finds any message runs a batch with what is there. The first batch of a
query runs at once (as Kafka's), and so does every batch of ``Trigger.AvailableNow``, which
reads everything up to its target whatever the minimum (the caller does not ask).
``maxMessagesPerTrigger`` / ``maxBytesPerTrigger`` still cap a batch that runs.
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
        many: a caller may stop counting at the minimum). A batch that is not held counts
        as run from now."""
        if pending <= 0:
            return False
        now = self._clock()
        if pending < self.min_messages and now - self._last_batch < self.max_delay_s:
            return True
        self._last_batch = now
        return False
