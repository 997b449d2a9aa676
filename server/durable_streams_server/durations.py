"""Durations with units (``500ms``, ``5s``, ``7d``) for the settings named by their unit.

A setting whose flag ends in its unit (``--long-poll-timeout-ms``, ``--lease-ttl-s``,
``--vacuum-retention-hours``) keeps that unit for a plain number, so ``--long-poll-timeout-ms
30000`` means what it always meant; a number with a unit is converted into the setting's unit
(``--long-poll-timeout-ms 5s`` is 5000). The same parser reads the flag, its environment variable
and the configuration file's string, so a duration is written the same way everywhere. A value
that is not a whole number of the unit of a whole-number setting is refused, never rounded:
``--idle-stream-s 500ms`` would otherwise silently mean 0 (never).
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass

UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
"""The units a duration may carry, in seconds."""
FLAG_UNITS = {"-ms": "ms", "-s": "s", "-hours": "h"}
"""A flag's name ending → the unit of its plain numbers."""
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)\s*")
FORMS = "a plain number in the setting's unit, or a number with a unit: ms, s, m, h, d (e.g. 500ms, 5s, 7d)"


def flag_unit(flag: str) -> str | None:
    """The unit ``flag`` is named with (``--request-timeout-s`` → ``s``), or ``None``."""
    for ending, unit in FLAG_UNITS.items():
        if flag.endswith(ending):
            return unit
    return None


@dataclass(frozen=True)
class Duration:
    """An argparse ``type``: a duration in ``unit``, as an ``int`` or a ``float`` (``kind``)."""

    unit: str
    kind: type[int] | type[float]

    def __call__(self, text: str) -> int | float:
        try:
            return self.kind(text)  # a plain number: the flag's own unit, as before
        except ValueError:
            pass
        match = _DURATION.fullmatch(text)
        if match is None:
            raise argparse.ArgumentTypeError(f"{text!r} is not a duration: {FORMS}")
        return self.of(float(match.group(1)) * UNIT_SECONDS[match.group(2)], text)

    def of(self, seconds: float, written: object) -> int | float:
        """``seconds`` in this unit; ``ArgumentTypeError`` if a whole number is needed and it is not one."""
        value = seconds / UNIT_SECONDS[self.unit]
        if self.kind is float:
            return value
        whole = round(value)
        if not math.isclose(value, whole, rel_tol=1e-9, abs_tol=1e-9):
            raise argparse.ArgumentTypeError(f"{written!r} is not a whole number of {_UNIT_NAMES[self.unit]}")
        return whole


_UNIT_NAMES = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
