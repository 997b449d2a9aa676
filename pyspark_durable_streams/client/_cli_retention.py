"""The CLI's retention limits: ``create --max-age/--max-bytes/--max-messages`` and ``retention``."""

from __future__ import annotations

import argparse

from ._client import Client
from .models import NO_LIMIT, Limit, Retention

_FLAGS = (
    ("--max-age", "max_age_seconds", "seconds: messages appended longer ago are removed"),
    ("--max-bytes", "max_bytes", "messages older than the newest this many bytes are removed"),
    ("--max-messages", "max_messages", "messages older than the newest this many are removed"),
)


def _limit(raw: str) -> Limit:
    if raw.strip().lower() == NO_LIMIT:
        return NO_LIMIT
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or {NO_LIMIT!r}, got {raw!r}")
    return value


def add_limits(parser: argparse.ArgumentParser) -> None:
    """The retention-limit options (a positive integer, or ``none``: no limit)."""
    for flag, dest, text in _FLAGS:
        parser.add_argument(flag, dest=dest, type=_limit, metavar="N|none", help=f"retention limit: {text}")


def limits(args: argparse.Namespace) -> Retention | None:
    """The limits the options named, if any."""
    named = {dest: getattr(args, dest) for _, dest, _ in _FLAGS if getattr(args, dest) is not None}
    return Retention(**named) if named else None


def retention_command(client: Client, args: argparse.Namespace) -> int:
    """``retention STREAM [--max-age N|none] ...``: change the limits named, then print the stream's."""
    stream = client.stream(args.stream)
    named = limits(args)
    current = stream.retention.change(named) if named is not None else stream.metadata().retention
    shown = current.named() if current is not None else {}
    print(" ".join(f"{name}={value}" for name, value in shown.items()) or "no retention limits")
    return 0
