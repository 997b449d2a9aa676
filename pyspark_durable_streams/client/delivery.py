"""Idempotent delivery of one producer request: its headers, its retries, ``Retry-After``.

The client's ``Producer`` and the Spark sink's ``TaskSender`` both append with the
idempotent-producer headers (spec 5.2.1) and share this one loop. A request is one
(Producer-Id, Epoch, Seq) triple and a body; every retry repeats both exactly, so the
server stores the request at most once (``200`` stored, ``204`` stored already: both
delivered). What happens to an attempt:

* a connection failure or timeout (the request may or may not have been stored), ``5xx``
  or ``429`` is retried after the next ``Backoff`` delay, or after the server's
  ``Retry-After`` when that is longer;
* the caller may name more errors to retry (``retry_also``: the sink backs off on a
  ``409`` gap it cannot explain) and may resend at once, without backing off or counting a
  retry (``resend_now``: a request that overtook its predecessor, which has landed since);
* once the backoff's deadline is spent, the last error is raised; any other error is
  raised at once. What an error means (fencing, a closed stream) is the caller's business.

``retrying`` is that loop on its own, for any request: ``Stream.append`` uses it with
``append_retry_rule`` (plain appends are not idempotent, see there).

Time is read and spent through the ``Backoff`` (its ``clock`` and ``sleep``), and requests
go through the client's ``HTTP`` layer and its ``Transport``: tests replace both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import requests

from . import errors
from ._http import HTTP, USE_DEFAULT, Backoff, Timeout, UseDefault
from .models import ARROW_STREAM

T = TypeVar("T")
TRANSIENT = errors.TRANSIENT
"""Connection failures, timeouts, 5xx and 429: retried with the same triple."""


@dataclass(frozen=True)
class ProducerRequest:
    """One append of an idempotent producer: where, the triple, and the body."""

    url: str
    content_type: str
    producer_id: str
    epoch: int
    seq: int
    body: bytes
    bulk: bool = False
    """The body is a bulk append (``client.bulk``) of messages of ``content_type``."""

    def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The request's headers: ``extra`` (e.g. a per-producer ``Authorization``) first,
        then the content type(s) and the triple, which nothing overrides."""
        content = (
            {"Content-Type": ARROW_STREAM, "Stream-Bulk-Content-Type": self.content_type}
            if self.bulk
            else {"Content-Type": self.content_type}
        )
        return {
            **(extra or {}),
            **content,
            "Producer-Id": self.producer_id,
            "Producer-Epoch": str(self.epoch),
            "Producer-Seq": str(self.seq),
        }


def deliver(
    http: HTTP,
    request: ProducerRequest,
    *,
    backoff: Backoff,
    headers: Mapping[str, str] | None = None,
    timeout: Timeout | UseDefault = USE_DEFAULT,
    retry_also: tuple[type[errors.DurableStreamsError], ...] = (),
    resend_now: Callable[[errors.DurableStreamsError], bool] | None = None,
    on_retry: Callable[[], None] | None = None,
) -> requests.Response:
    """POST ``request`` until it is delivered (``200`` or ``204``: see the module docstring)."""
    sent = request.headers(headers)
    retryable = TRANSIENT + retry_also
    return retrying(
        lambda: http.request("POST", request.url, ok=(200, 204), headers=sent, content=request.body, timeout=timeout),
        backoff=backoff,
        retry=lambda exc: isinstance(exc, retryable),
        resend_now=resend_now,
        on_retry=on_retry,
    )


def retrying(
    attempt: Callable[[], T],
    *,
    backoff: Backoff,
    retry: Callable[[errors.DurableStreamsError], bool],
    resend_now: Callable[[errors.DurableStreamsError], bool] | None = None,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """The one retry loop: ``attempt()`` again while ``retry(error)`` says so and the backoff's
    deadline allows, pausing as ``Backoff.pause`` says (``Retry-After`` included)."""
    delays = backoff.delays()
    while True:
        try:
            return attempt()
        except errors.DurableStreamsError as exc:
            if not retry(exc):
                raise
            delay = next(delays, None)
            if delay is None:
                raise
            if resend_now is not None and resend_now(exc):
                continue
            if on_retry is not None:
                on_retry()
            backoff.pause(delay, exc)


def append_retry_rule(*, stream_seq: bool, retry: bool) -> Callable[[errors.DurableStreamsError], bool]:
    """Which failures of a plain append (no producer headers) are retried.

    A plain POST is not idempotent: after a lost answer the server may have stored it, and a
    resend would store it twice. So by default only failures that prove the request was not
    processed are retried (``errors.not_processed``). An append with ``Stream-Seq`` cannot be
    stored twice (the server refuses a seq that does not increase), so every transient
    failure is retried; should an earlier attempt have been stored, the retry answers ``409``.
    ``retry=True`` is the caller's opt-in to retry every transient failure anyway
    (at-least-once: a message may be stored twice)."""
    if stream_seq or retry:
        return lambda exc: isinstance(exc, TRANSIENT)
    return errors.not_processed
