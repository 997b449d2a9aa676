"""Subscription rules (PROTOCOL.md section 6): ids, glob patterns, request bodies, hashes.

Pure decisions only, no I/O. The ``__ds`` namespace: on each surface (the base surface
``/v1/stream/`` and every bucket ``/{bucket_id}/``) the first root-relative segment
``__ds`` is reserved for the control API, so no stream is ever named by it. Stream paths in
bodies are relative to that root: ``events/abc`` on the base surface names stream key
``v1/stream/events/abc``; in bucket ``b1`` the root is ``b1/`` and a path is a stream id.

Globs: a pattern is '/'-separated segments; ``*`` alone matches exactly one segment and
``**`` alone zero or more; any other segment matches itself literally. A ``*`` inside a
segment (``events-*``) is refused rather than silently taken literally.

Re-confirmation compares ``config_hash``: SHA-256 over the canonical JSON of the
normalized configuration (type, pattern, sorted unique streams, delivery, lease, description).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from .errors import BadRequest, Conflict
from .offsets import parse_offset

RESERVED_SEGMENT = "__ds"
SubscriptionType = Literal["webhook", "pull-wake"]
DEFAULT_LEASE_TTL_MS = 30_000
MIN_LEASE_TTL_MS = 1_000
MAX_LEASE_TTL_MS = 600_000
MAX_DESCRIPTION_CHARS = 1024
MAX_STREAMS_PER_REQUEST = 1000
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~:@-]{0,199}")
_FIELDS = frozenset({"type", "pattern", "streams", "webhook", "wake_stream", "lease_ttl_ms", "description"})


class AlreadyClaimed(Conflict):
    """409 ``ALREADY_CLAIMED``: the error body also names the holder and the generation."""

    def __init__(self, holder: str, generation: int) -> None:
        super().__init__(f"the subscription is claimed by {holder!r}", code="ALREADY_CLAIMED")
        self.details: dict[str, Any] = {"current_holder": holder, "generation": generation}


def fenced(message: str) -> Conflict:
    return Conflict(message, code="FENCED")


def is_reserved(root_relative: str) -> bool:
    """Whether a root-relative path lies in the reserved control namespace."""
    return root_relative == RESERVED_SEGMENT or root_relative.startswith(RESERVED_SEGMENT + "/")


def validate_subscription_id(subscription_id: str) -> str:
    return validate_control_name(subscription_id, "subscription id", "INVALID_SUBSCRIPTION_ID")


def validate_control_name(name: str, what: str, code: str) -> str:
    """A client-chosen name in the ``__ds`` namespace (a subscription id, a consumer's name)."""
    if not _ID_RE.fullmatch(name):
        raise BadRequest(
            f"invalid {what} {name!r}: 1 to 200 characters of A-Z a-z 0-9 . _ ~ : @ -, starting with a letter or digit",
            code=code,
        )
    return name


def validate_path(path: object, bucketed: bool, field: str = "streams") -> str:
    """A root-relative stream path as a body gives it (bucketed: a single stream id)."""
    if not isinstance(path, str) or not path:
        raise BadRequest(f"{field}: stream paths must be non-empty strings", code="INVALID_STREAM_PATH")
    segments = path.split("/")
    if any(segment in ("", ".", "..") for segment in segments) or "\0" in path:
        raise BadRequest(f"{field}: invalid stream path {path!r}", code="INVALID_STREAM_PATH")
    if bucketed and len(segments) > 1:
        raise BadRequest(f"{field}: a bucket's stream ids have no '/': {path!r}", code="INVALID_STREAM_PATH")
    if is_reserved(path):
        raise BadRequest(f"{field}: {path!r} is in the reserved __ds namespace", code="INVALID_STREAM_PATH")
    return path


def validate_pattern(pattern: object) -> str:
    if not isinstance(pattern, str) or not pattern:
        raise BadRequest("pattern must be a non-empty string", code="INVALID_PATTERN")
    for segment in pattern.split("/"):
        if segment in ("", ".", ".."):
            raise BadRequest(f"pattern {pattern!r} has an empty, '.' or '..' segment", code="INVALID_PATTERN")
        if "*" in segment and segment not in ("*", "**"):
            raise BadRequest(f"pattern {pattern!r}: '*' and '**' must be whole segments", code="INVALID_PATTERN")
    return pattern


def glob_match(pattern: str, path: str) -> bool:
    """``*`` matches one segment, ``**`` zero or more; other segments match literally."""
    return _match(pattern.split("/"), path.split("/"))


def _match(pattern: list[str], path: list[str]) -> bool:
    if not pattern:
        return not path
    head = pattern[0]
    if head == "**":
        return any(_match(pattern[1:], path[skip:]) for skip in range(len(path) + 1))
    if not path or (head != "*" and head != path[0]):
        return False
    return _match(pattern[1:], path[1:])


def literal_prefix(pattern: str) -> str:
    """The root-relative prefix every match of ``pattern`` starts with (for auth and backfill)."""
    literal: list[str] = []
    for segment in pattern.split("/"):
        if segment in ("*", "**"):
            return "/".join(literal) + "/" if literal else ""
        literal.append(segment)
    return "/".join(literal)


@dataclass(frozen=True, slots=True)
class SubscriptionConfig:
    """A validated, normalized subscription configuration (what re-confirmation compares)."""

    type: SubscriptionType
    pattern: str | None
    streams: tuple[str, ...]
    webhook_url: str | None
    wake_stream: str | None
    lease_ttl_ms: int
    description: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "pattern": self.pattern,
            "streams": list(self.streams),
            "webhook_url": self.webhook_url,
            "wake_stream": self.wake_stream,
            "lease_ttl_ms": self.lease_ttl_ms,
            "description": self.description,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SubscriptionConfig:
        return cls(
            type=data["type"],
            pattern=data["pattern"],
            streams=tuple(data["streams"]),
            webhook_url=data["webhook_url"],
            wake_stream=data["wake_stream"],
            lease_ttl_ms=data["lease_ttl_ms"],
            description=data["description"],
        )

    @property
    def config_hash(self) -> str:
        canonical = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def parse_config(body: object, bucketed: bool) -> SubscriptionConfig:
    """Validate a create body; 400 with a field-naming message for anything wrong."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", code="INVALID_SUBSCRIPTION")
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise BadRequest(f"unknown field(s): {', '.join(unknown)}", code="INVALID_SUBSCRIPTION")
    kind = body.get("type")
    if kind not in ("webhook", "pull-wake"):
        raise BadRequest("type must be 'webhook' or 'pull-wake'", code="INVALID_SUBSCRIPTION")
    pattern = validate_pattern(body["pattern"]) if body.get("pattern") is not None else None
    streams = parse_streams(body.get("streams", []), bucketed) if body.get("streams") is not None else ()
    if pattern is None and not streams:
        raise BadRequest("at least one of pattern or streams is required", code="INVALID_SUBSCRIPTION")
    webhook_url = wake_stream = None
    if kind == "webhook":
        webhook = body.get("webhook")
        if not isinstance(webhook, dict) or not isinstance(webhook.get("url"), str) or set(webhook) - {"url"}:
            raise BadRequest('a webhook subscription needs webhook: {"url": ...}', code="INVALID_SUBSCRIPTION")
        webhook_url = webhook["url"]
        if body.get("wake_stream") is not None:
            raise BadRequest("wake_stream is for pull-wake subscriptions", code="INVALID_SUBSCRIPTION")
    else:
        wake_stream = validate_path(body.get("wake_stream"), bucketed, "wake_stream")
        if body.get("webhook") is not None:
            raise BadRequest("webhook is for webhook subscriptions", code="INVALID_SUBSCRIPTION")
    lease = body.get("lease_ttl_ms", DEFAULT_LEASE_TTL_MS)
    if lease is None:
        lease = DEFAULT_LEASE_TTL_MS
    if not isinstance(lease, int) or isinstance(lease, bool) or not MIN_LEASE_TTL_MS <= lease <= MAX_LEASE_TTL_MS:
        raise BadRequest(
            f"lease_ttl_ms must be an integer from {MIN_LEASE_TTL_MS} to {MAX_LEASE_TTL_MS}",
            code="INVALID_SUBSCRIPTION",
        )
    description = body.get("description")
    if description is not None and (not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS):
        raise BadRequest(
            f"description must be a string of at most {MAX_DESCRIPTION_CHARS} characters", code="INVALID_SUBSCRIPTION"
        )
    return SubscriptionConfig(kind, pattern, streams, webhook_url, wake_stream, lease, description)


def parse_streams(value: object, bucketed: bool) -> tuple[str, ...]:
    """A list of root-relative stream paths, normalized: unique and sorted."""
    if not isinstance(value, list) or len(value) > MAX_STREAMS_PER_REQUEST:
        raise BadRequest(
            f"streams must be a list of at most {MAX_STREAMS_PER_REQUEST} stream paths", code="INVALID_SUBSCRIPTION"
        )
    return tuple(sorted({validate_path(path, bucketed) for path in value}))


def parse_membership_body(body: object, bucketed: bool) -> tuple[str, ...]:
    if not isinstance(body, dict) or set(body) != {"streams"}:
        raise BadRequest('the body must be {"streams": [...]}', code="INVALID_SUBSCRIPTION")
    return parse_streams(body["streams"], bucketed)


@dataclass(frozen=True, slots=True)
class WakeReport:
    """A callback / ack / release body: which wake it answers, what it acks, whether done."""

    wake_id: str
    generation: int
    acks: tuple[tuple[str, int], ...]
    """(stream path, acked message sequence) pairs, in request order."""
    done: bool


def parse_wake_report(body: object, bucketed: bool, *, allow_acks: bool = True) -> WakeReport:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", code="INVALID_REQUEST")
    wake_id, generation = body.get("wake_id"), body.get("generation")
    if not isinstance(wake_id, str) or not isinstance(generation, int) or isinstance(generation, bool):
        raise BadRequest("wake_id (string) and generation (integer) are required", code="INVALID_REQUEST")
    raw_acks = body.get("acks", []) if allow_acks else []
    if not isinstance(raw_acks, list):
        raise BadRequest("acks must be a list", code="INVALID_REQUEST")
    acks = []
    for item in raw_acks:
        if not isinstance(item, dict) or not isinstance(item.get("offset"), str):
            raise BadRequest('each ack must be {"stream": path, "offset": offset}', code="INVALID_REQUEST")
        offset = parse_offset(item["offset"])
        if offset.within:
            raise BadRequest("acks name message boundaries (…_0000000000000000)", code="INVALID_OFFSET")
        acks.append((validate_path(item.get("stream"), bucketed, "acks"), offset.seq))
    done = body.get("done", False)
    if not isinstance(done, bool):
        raise BadRequest("done must be a boolean", code="INVALID_REQUEST")
    return WakeReport(wake_id, generation, tuple(acks), done)


def parse_claim_body(body: object) -> str:
    if not isinstance(body, dict) or not isinstance(body.get("worker"), str) or not body["worker"].strip():
        raise BadRequest('the body must be {"worker": "<worker name>"}', code="INVALID_REQUEST")
    worker: str = body["worker"]
    if len(worker) > 200:
        raise BadRequest("worker names are at most 200 characters", code="INVALID_REQUEST")
    return worker
