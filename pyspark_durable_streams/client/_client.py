"""The entry point: a ``Client`` holds the HTTP layer that every handle it makes shares."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType

import requests

from . import errors
from ._http import DEFAULT_TIMEOUT, HTTP, Auth, Backoff, RequestsTransport, Timeout, Transport, Verify
from .appends import append_result
from .buckets import Bucket
from .consumers import ConsumerLag, Consumers, consumer_lag
from .delivery import ProducerRequest, deliver
from .files import RemoteFile
from .models import AppendResult
from .stream import Stream
from .subscriptions import Subscriptions


class Client:
    """A Durable Streams server at ``base_url``.

    ``token`` sends ``Authorization: Bearer <token>`` with every request (reads, long-polls
    and SSE included); ``auth`` takes anything requests accepts (Basic, Digest, custom);
    ``headers`` are added to every request; ``timeout`` is the default for every call (each
    method can override headers and timeout). ``verify`` is the TLS check of an ``https://``
    server: a CA bundle path trusts a private CA or a self-signed certificate, False turns the
    check off, None (the default) keeps the session's setting (the system CAs).
    ``session``: pass your own ``requests.Session`` for proxies, TLS settings or
    connection-pool sizes. ``transport`` replaces the whole requests-based ``Transport``
    (then ``session``, ``auth`` and ``verify``, which configure that one, must not be given):
    tests pass a scripted one. A session or transport passed in is closed by its owner, not
    by ``close()``. ``backoff`` governs how long readers and producers keep retrying a server
    that is unreachable or answering 5xx / 429.
    ``transport`` (the attribute) is the ``HTTP`` layer every handle of this client shares.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        auth: Auth = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout = DEFAULT_TIMEOUT,
        session: requests.Session | None = None,
        backoff: Backoff | None = None,
        verify: Verify = None,
        transport: Transport | None = None,
    ) -> None:
        self._owns_transport = transport is None
        if transport is None:
            transport = RequestsTransport(session, auth=auth, verify=verify)
        elif session is not None or auth is not None or verify is not None:
            raise ValueError("session, auth and verify configure the default transport: give them to it instead")
        self.transport = HTTP(base_url, transport, token=token, headers=headers, timeout=timeout)
        self.backoff = backoff or Backoff()

    def __repr__(self) -> str:
        return f"Client({self.transport.base_url!r})"

    def stream(self, path: str, *, content_type: str | None = None) -> Stream:
        """A handle on the stream at ``path`` (relative to the base URL) or at a full URL."""
        return Stream(self.transport, self.transport.url(path), content_type=content_type, backoff=self.backoff)

    def bucket(self, bucket_id: str) -> Bucket:
        return Bucket(self.transport, bucket_id, backoff=self.backoff)

    def subscriptions(self, bucket_id: str | None = None) -> Subscriptions:
        """The subscriptions of the base surface (``v1/stream/``) or of a bucket."""
        return Subscriptions(self.transport, f"{bucket_id}/" if bucket_id else "v1/stream/", backoff=self.backoff)

    def consumers(self, bucket_id: str | None = None) -> Consumers:
        """The named consumers and tombstones of the base surface or of a bucket (``consumers``)."""
        root = self.transport.url(f"{bucket_id}/" if bucket_id else "v1/stream/")
        return Consumers(self.transport, root, backoff=self.backoff)

    def consumer_lag(self) -> list[ConsumerLag]:
        """Every named consumer's lag per stream that this client's token may read."""
        return consumer_lag(self.transport)

    def open_file(self, url: str, size: int) -> RemoteFile:
        """A read plan's file (``PlannedFile.url`` and ``.size``) as a seekable binary file read
        with ``Range`` requests through this client's connections, without its credentials:
        the URL is its own grant (``files``)."""
        return RemoteFile(self.transport, url, size)

    def deliver(
        self,
        request: ProducerRequest,
        *,
        backoff: Backoff | None = None,
        retry_also: tuple[type[errors.DurableStreamsError], ...] = (),
        resend_now: Callable[[errors.DurableStreamsError], bool] | None = None,
        on_retry: Callable[[], None] | None = None,
    ) -> AppendResult:
        """Send one idempotent-producer append, numbered by the caller, until it is delivered
        (``duplicate``: the server had it already); retries repeat it exactly
        (``delivery.deliver``: ``retry_also``, ``resend_now`` and ``on_retry`` are explained
        there). For batching and numbering by the client, use a ``Producer``."""
        response = deliver(
            self.transport,
            request,
            backoff=backoff or self.backoff,
            retry_also=retry_also,
            resend_now=resend_now,
            on_retry=on_retry,
        )
        return append_result(response, producer=True)

    def close(self) -> None:
        """Close the connection pool, unless the session or transport was passed in (its owner closes it)."""
        if self._owns_transport:
            self.transport.transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
