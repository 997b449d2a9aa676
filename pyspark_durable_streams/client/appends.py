"""What the append methods send and what they return: option sets, JSON batch bodies, and the
``AppendResult`` read off an append's answer."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

import requests

from ._http import Timeout, UseDefault, flag, header
from .models import AppendResult


class AppendOptions(TypedDict, total=False):
    """The keyword options shared by the append methods."""

    seq: str | None
    if_match: str | None
    close: bool
    retry: bool
    headers: Mapping[str, str] | None
    timeout: Timeout | UseDefault


def encode_json_batch(values: Iterable[Any]) -> bytes:
    """One POST body holding each value as its own message.

    The server flattens exactly one level of a JSON array, so every value (arrays
    included) is wrapped: ``[1, 2]`` sent through here arrives as the one message ``[1, 2]``.
    """
    items = [json.dumps(value, separators=(",", ":"), allow_nan=False) for value in values]
    if not items:
        raise ValueError("a JSON append needs at least one value (the protocol rejects an empty array)")
    return ("[" + ",".join(items) + "]").encode("utf-8")


def append_result(response: requests.Response, *, producer: bool = False) -> AppendResult:
    epoch, seq = header(response, "Producer-Epoch"), header(response, "Producer-Seq")
    return AppendResult(
        next_offset=header(response, "Stream-Next-Offset"),
        closed=flag(response, "Stream-Closed"),
        duplicate=producer and response.status_code == 204,
        producer_epoch=int(epoch) if epoch is not None and epoch.isdigit() else None,
        producer_seq=int(seq) if seq is not None and seq.isdigit() else None,
    )


def if_match_value(offset: str) -> str:
    """The ``If-Match`` of a conditional append at ``offset`` (a ``Stream-Next-Offset``), quoted;
    an ``ETag`` passed as it came (quoted already) is sent as it is."""
    return offset if offset.startswith('"') else f'"{offset}"'


def body_bytes(data: bytes | str | None) -> bytes | None:
    if data is None:
        return None
    return data.encode("utf-8") if isinstance(data, str) else data
