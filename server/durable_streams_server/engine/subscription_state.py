"""One subscription's state: configuration, stream links (cursors), the current wake.

Plain data with JSON round-trips (what subscription records carry, ``subscription_store``) and the few
decisions that need nothing but this state: pending work, fencing, lease expiry.

A link's ``acked`` is a message sequence in the same space as a stream's tail: the next
message to process, so ``tail > acked`` means pending work and acking the wake snapshot's
tail offset makes the link caught up. A linked stream that does not exist (yet) has
``acked`` 0: when it appears, all of it is pending.

A wake is the unit of fencing: ``generation`` (per subscription, never reused) and a
random ``wake_id``. ``holder`` is the claiming worker (pull-wake) or ``"webhook"``;
``lease_expires_ms`` is ``None`` while nobody holds it (a pull-wake wake not yet claimed,
a webhook wake waiting for a retry). Webhook retry bookkeeping (``attempts``,
``next_attempt_ms``, ``delivered``) lives on the wake so it is persisted with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..protocol.offsets import encode_seq
from ..protocol.subscriptions import SubscriptionConfig, fenced, glob_match


@dataclass(slots=True)
class Link:
    glob: bool = False
    explicit: bool = False
    acked: int = 0

    @property
    def link_type(self) -> str:
        return "explicit" if self.explicit else "glob"


@dataclass(slots=True)
class Wake:
    wake_id: str
    generation: int
    tails: dict[str, int]
    """The wake snapshot: path -> tail at issue time (what ``done`` auto-acks)."""
    holder: str | None = None
    lease_expires_ms: int | None = None
    attempts: int = 0
    next_attempt_ms: int | None = None
    delivered: bool = False
    """Webhook: the receiver answered 2xx. Pull-wake: the wake event is in the wake stream."""

    def to_json(self) -> dict[str, Any]:
        return {
            "wake_id": self.wake_id,
            "generation": self.generation,
            "tails": dict(self.tails),
            "holder": self.holder,
            "lease_expires_ms": self.lease_expires_ms,
            "attempts": self.attempts,
            "next_attempt_ms": self.next_attempt_ms,
            "delivered": self.delivered,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Wake:
        return cls(**data)


@dataclass(slots=True)
class Subscription:
    root: str
    """Stream-key prefix of the surface: ``v1/stream/`` or ``<bucket_id>/``."""
    subscription_id: str
    config: SubscriptionConfig
    created_ms: int
    root_url: str
    """The public URL of the stream root, for ``callback_url`` and ``jwks_url``."""
    links: dict[str, Link] = field(default_factory=dict)
    generation: int = 0
    wake: Wake | None = None
    deleted: bool = False
    uid: int = 0
    """Its incarnation: the LSN of its first record (0 until that is submitted)."""
    last_lsn: int = 0
    """The LSN of its newest record (what an answer about it waits to be durable)."""

    @property
    def key(self) -> str:
        return self.root + self.subscription_id

    def matches(self, path: str) -> bool:
        return self.config.pattern is not None and glob_match(self.config.pattern, path)

    def pending(self, tails: dict[str, int]) -> dict[str, int]:
        """Linked paths whose tail is past their acked position -> that tail."""
        return {path: tails[path] for path, link in self.links.items() if tails.get(path, 0) > link.acked}

    def stream_views(self, tails: dict[str, int], snapshot: dict[str, int] | None = None) -> list[dict[str, Any]]:
        """The ``streams`` array of responses and wakes (``snapshot`` fixes the tails)."""
        views = []
        for path in sorted(self.links):
            link = self.links[path]
            view: dict[str, Any] = {"path": path, "link_type": link.link_type, "acked_offset": encode_seq(link.acked)}
            if snapshot is not None:
                tail = snapshot.get(path, tails.get(path, 0))
                view["tail_offset"] = encode_seq(max(tail, link.acked))
                view["has_pending"] = tail > link.acked
            views.append(view)
        return views

    def check_current(self, generation: int, wake_id: str) -> Wake:
        """The current wake if ``generation`` and ``wake_id`` name it; 409 ``FENCED`` otherwise."""
        wake = self.wake
        if self.deleted:
            raise fenced("the subscription was deleted")
        if wake is None or wake.generation != generation or wake.wake_id != wake_id:
            raise fenced(f"wake {wake_id!r} of generation {generation} is not the subscription's current wake")
        return wake

    def apply_acks(self, acks: dict[str, int]) -> None:
        """Acks only move cursors forward (a late or repeated ack never rewinds one)."""
        for path, seq in acks.items():
            link = self.links.get(path)
            if link is not None:
                link.acked = max(link.acked, seq)

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "id": self.subscription_id,
            "config": self.config.to_json(),
            "created_ms": self.created_ms,
            "root_url": self.root_url,
            "links": {path: [link.glob, link.explicit, link.acked] for path, link in self.links.items()},
            "generation": self.generation,
            "wake": self.wake.to_json() if self.wake is not None else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Subscription:
        return cls(
            root=data["root"],
            subscription_id=data["id"],
            config=SubscriptionConfig.from_json(data["config"]),
            created_ms=data["created_ms"],
            root_url=data["root_url"],
            links={path: Link(*value) for path, value in data["links"].items()},
            generation=data["generation"],
            wake=Wake.from_json(data["wake"]) if data["wake"] is not None else None,
        )
