"""One stream's retention: its policy, its retention point, and the marks that place the next one.

Theory of operation
-------------------
A retention point is a message sequence: everything below it is gone (reads answer ``410``,
storage's maintenance deletes the rows). It only ever moves up, and only to a *mark*: a point
between two appends where the stream remembers three facts that hold exactly there,

    (seq, bytes_before, ts_before) = (the append's first sequence, the bytes of every message
                                      below it, the time the append before it was made)

so that for any mark each limit of a policy is decided without reading a message back:

* ``max_bytes``: keeping from the mark keeps ``bytes_total - bytes_before`` bytes;
* ``max_age_s``: every message below the mark was appended at or before ``ts_before``;
* ``max_messages``: keeping from the mark keeps ``tail - seq`` messages.

Each limit is monotone over the marks (an older mark keeps more), so the next point is the
newest mark that some limit lets go of (``next_cut``), or its tail once the age limit lets go of
everything (a stream that stopped growing); the stream keeps what its limits ask for plus at most
the run up to the next mark. A mark is taken at an append once the run since the
last one reaches an eighth of a limit (``_spacing``; for age, the time from the last mark to the
append, so the first append after a quiet hour marks where that hour's messages end), so the
marks in a retained window are a handful per limit. Marks are taken in the append's transition
from the record's own fields, so a replay after a crash takes the same ones; and they are at
most ``MAX_MARKS`` (the older half thinned when a stream outruns maintenance: fewer places to
cut, never a wrong one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..protocol.retention import RetentionPolicy

MAX_MARKS = 64
_SPACING_PARTS = 8

Mark = tuple[int, int, int]
"""``(seq, bytes_before, ts_before)``: see the module docstring."""


@dataclass(slots=True)
class RetentionState:
    policy: RetentionPolicy
    seq: int = 0
    """The retention point: messages below it are gone."""
    dropped_bytes: int = 0
    """Bytes of the messages below ``seq``."""
    marks: list[Mark] = field(default_factory=list)
    visible_seq: int = 0
    """The point readers see: ``seq`` once the record that moved it is durable (derived)."""
    flushed_seq: int = 0
    """The retention point as last written to Delta: what maintenance may delete below (derived)."""

    def note_append(self, first_seq: int, bytes_before: int, ts_before: int, ts: int) -> None:
        """An append made at ``ts`` starts at ``first_seq``: a mark there if the run since the last
        one is long (in bytes or messages before it, or in time up to it)."""
        if not self.policy:
            return
        if self.marks:
            last_seq, last_bytes, last_ts = self.marks[-1]
            bytes_step, seq_step, age_step = _spacing(self.policy)
            if not (
                (bytes_step and bytes_before - last_bytes >= bytes_step)
                or (seq_step and first_seq - last_seq >= seq_step)
                or (age_step and ts - last_ts >= age_step)
            ):
                return
        self.marks.append((first_seq, bytes_before, ts_before))
        if len(self.marks) > MAX_MARKS:
            half = MAX_MARKS // 2
            self.marks[:half] = self.marks[:half:2]

    def next_cut(
        self, limit: int, visible_tail: int, bytes_total: int, now_ms: int, tail: Mark | None = None
    ) -> Mark | None:
        """The newest mark (at most ``limit``) some limit of the policy lets go of, if past ``seq``.
        ``tail``: the stream's tail as a mark too, when every append is visible, so that an age
        limit lets go of a stream that stopped growing (keeping bytes or messages never cuts there)."""
        policy = self.policy
        age_ms = policy.max_age_s * 1000 if policy.max_age_s is not None else None
        for mark in reversed([*self.marks, *([tail] if tail is not None else [])]):
            seq, before, ts = mark
            if seq <= self.seq or seq > limit:
                continue
            if (
                (policy.max_bytes is not None and bytes_total - before >= policy.max_bytes)
                or (policy.max_messages is not None and visible_tail - seq >= policy.max_messages)
                or (age_ms is not None and ts <= now_ms - age_ms)
            ):
                return mark
        return None

    def note_flushed(self, state: dict[str, Any]) -> None:
        """The flusher wrote the stream's ``state`` to Delta: its point is what maintenance may delete below."""
        written = state.get("retention")
        if written:
            self.flushed_seq = max(self.flushed_seq, written.get("seq", 0))

    def cut(self, seq: int, dropped_bytes: int) -> None:
        """Move the retention point up to ``seq``; the marks at or below it are spent."""
        if seq > self.seq:
            self.seq, self.dropped_bytes = seq, dropped_bytes
            self.marks = [mark for mark in self.marks if mark[0] > seq]

    def change(self, policy: RetentionPolicy, tail: int, bytes_total: int, ts: int) -> None:
        """A new policy; a stream that had no marks gets one at its tail (everything appended
        so far counts as appended now: never removed before its time)."""
        self.policy = policy
        if not policy:
            self.marks = []
        elif not self.marks and tail > self.seq:
            self.marks.append((tail, bytes_total, ts))

    # -- persistence ------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy.to_json(),
            "seq": self.seq,
            "dropped_bytes": self.dropped_bytes,
            "marks": [list(mark) for mark in self.marks],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RetentionState:
        state = cls(
            RetentionPolicy.from_json(data.get("policy")),
            seq=data.get("seq", 0),
            dropped_bytes=data.get("dropped_bytes", 0),
            marks=[(seq, before, ts) for seq, before, ts in data.get("marks", ())],
        )
        state.visible_seq = state.flushed_seq = state.seq  # (loaded from Delta: durable and flushed)
        return state


def _spacing(policy: RetentionPolicy) -> tuple[int, int, int]:
    """Bytes, messages and milliseconds between two marks (0: that limit is not set)."""
    return (
        max(1, policy.max_bytes // _SPACING_PARTS) if policy.max_bytes else 0,
        max(1, policy.max_messages // _SPACING_PARTS) if policy.max_messages else 0,
        max(1, policy.max_age_s * 1000 // _SPACING_PARTS) if policy.max_age_s else 0,
    )
