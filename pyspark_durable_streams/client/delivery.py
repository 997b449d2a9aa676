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

Time is read and spent through the ``Backoff`` (its ``clock`` and ``sleep``), and requests
go through the client's ``HTTP`` layer and its ``Transport``: tests replace both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import requests

from . import errors
from ._http import HTTP, USE_DEFAULT, Backoff, Timeout, UseDefault

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

    def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The request's headers: ``extra`` (e.g. a per-producer ``Authorization``) first,
        then the content type and the triple, which nothing overrides."""
        return {
            **(extra or {}),
            "Content-Type": self.content_type,
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
    delays = backoff.delays()
    while True:
        try:
            return http.request("POST", request.url, ok=(200, 204), headers=sent, content=request.body, timeout=timeout)
        except retryable as exc:
            delay = next(delays, None)
            if delay is None:
                raise
            if resend_now is not None and resend_now(exc):
                continue
            if on_retry is not None:
                on_retry()
            backoff.pause(delay, exc)
