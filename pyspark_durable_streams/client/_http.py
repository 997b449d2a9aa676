"""The HTTP layer: the defaults every call shares, over a pluggable ``Transport``.

Everything that touches the network goes through ``HTTP.request`` so that default headers,
timeouts and the mapping of failures onto the error hierarchy happen in one place. Below it
sits the transport seam: ``Transport.send`` carries one ``Request`` and returns the answer
as it is. The default, ``RequestsTransport``, is a ``requests.Session`` (applications inject
their own session for proxies, TLS settings or bigger pools); tests inject a scripted
transport to replay 409s, 429s, 503s and connection resets deterministically.

``Backoff`` paces retries; its clock and sleep are injectable for the same reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import ssl
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias
from urllib.parse import quote, urljoin

import requests
import urllib3.exceptions
from requests.auth import AuthBase

from . import errors

Timeout: TypeAlias = float | tuple[float, float] | None
"""requests' timeout: seconds for both phases, ``(connect, read)``, or None for no limit."""

Auth: TypeAlias = AuthBase | tuple[str, str] | None
"""Anything ``requests`` accepts as ``auth=`` (Basic with a tuple, Digest, custom AuthBase)."""

Verify: TypeAlias = bool | str | None
"""TLS verification: True/False, a CA bundle file (e.g. a self-signed server's certificate),
or None to keep the session's own setting (which verifies against the system CAs)."""

DEFAULT_TIMEOUT: Timeout = (10.0, 90.0)
"""The read timeout outlasts a long-poll (30 s on our server) and an SSE connection (~60 s)."""

_ERROR_BODY_LIMIT = 64 * 1024
MAX_REDIRECTS = 5
FOLLOWS_REDIRECTS = ("Durable-Streams-Redirects", "follow")
"""Tells a cluster node that this client follows a 307 itself, with its credentials and body
(``HTTP._send_following``), so the node redirects instead of relaying the request."""


class UseDefault:
    """Marks a per-call argument as "not given": None already means "no timeout"."""

    def __repr__(self) -> str:
        return "USE_DEFAULT"


USE_DEFAULT = UseDefault()


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter for retrying what is safe to retry.

    ``deadline_s`` bounds the total time spent retrying one operation, so a server that
    stays down turns into an error instead of a hang. ``clock`` and ``sleep`` are how time is
    read and spent (tests pass fakes so that no retry sleeps for real).
    """

    initial_s: float = 0.05
    max_s: float = 2.0
    deadline_s: float = 60.0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False, compare=False)

    def delays(self) -> Iterator[float]:
        """Delays before each retry, until the deadline is spent."""
        deadline = self.clock() + self.deadline_s
        delay = self.initial_s
        while True:
            remaining = deadline - self.clock()
            if remaining <= 0:
                return
            yield min(remaining, delay * (0.5 + random.random() / 2))
            delay = min(self.max_s, delay * 2)

    def pause(self, delay: float, exc: BaseException) -> None:
        """Sleep ``delay``, or longer where the server's ``Retry-After`` (429, 503) asks for more."""
        retry_after = exc.retry_after if isinstance(exc, errors.HTTPStatusError) else None
        self.sleep(max(delay, retry_after or 0.0))


@dataclass(frozen=True)
class Request:
    """One HTTP request as the HTTP layer hands it to a ``Transport``: the client's default
    headers are merged in and the timeout is resolved."""

    method: str
    url: str
    params: Mapping[str, str] | None
    headers: Mapping[str, str]
    content: bytes | None
    timeout: Timeout
    stream: bool
    credentials: bool = True
    """False for a URL that carries its own grant (a signed or presigned file URL): the client's
    default headers are not merged in, and the transport adds no credentials of its own."""


class Transport(Protocol):
    """The transport seam (in the spirit of httpx's): what carries one request to the server.

    ``send`` returns the server's answer whatever its status (the HTTP layer maps statuses
    onto errors); a network failure raises ``requests``' exceptions or ``errors.TransportError``.
    With ``request.stream`` the body is left unread. ``RequestsTransport`` is the default;
    tests pass a scripted one to drive retry paths without a server.
    """

    def send(self, request: Request) -> requests.Response: ...

    def close(self) -> None: ...


class RequestsTransport:
    """The default ``Transport``: a ``requests.Session`` with the requests-level settings
    (auth, TLS verification). It closes the session on ``close()`` only if it made it.

    A request without ``credentials`` gets neither ``auth`` nor the session's
    ``Authorization`` header, nor one from ``~/.netrc``: an object store refuses a presigned
    URL that also carries other credentials, and a token must not travel to another host."""

    def __init__(self, session: requests.Session | None = None, *, auth: Auth = None, verify: Verify = None) -> None:
        self._owns_session = session is None
        self.session = session if session is not None else requests.Session()
        self.auth = auth
        self.verify = verify

    def send(self, request: Request) -> requests.Response:
        return self.session.request(
            request.method,
            request.url,
            params=request.params,
            headers=dict(request.headers),
            data=request.content,
            auth=self.auth if request.credentials else _without_credentials,
            verify=self.verify,
            timeout=request.timeout,
            stream=request.stream,
            allow_redirects=False,  # HTTP.request follows 307/308 itself, keeping the request whole
        )

    def close(self) -> None:
        if self._owns_session:
            self.session.close()


def _without_credentials(request: requests.PreparedRequest) -> requests.PreparedRequest:
    """An ``auth`` that removes the ``Authorization`` header the session's own headers put in
    (requests applies ``auth`` after merging them); given, it also keeps requests from
    looking in ``~/.netrc``."""
    request.headers.pop("Authorization", None)
    return request


class HTTP:
    """The HTTP layer every handle of a client shares (``Client.transport``): a base URL, the
    client-wide default headers and timeout, and the ``Transport`` that carries requests."""

    def __init__(
        self,
        base_url: str,
        transport: Transport,
        *,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout = DEFAULT_TIMEOUT,
    ) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self.transport = transport
        self.headers = {FOLLOWS_REDIRECTS[0]: FOLLOWS_REDIRECTS[1], **(headers or {})}
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"
        self.timeout = timeout

    def url(self, path: str) -> str:
        """An absolute URL: full URLs pass through, paths are taken relative to the base URL."""
        if "://" in path:
            return path
        return urljoin(self.base_url, path.lstrip("/"))

    def request(
        self,
        method: str,
        url: str,
        *,
        ok: Collection[int],
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        timeout: Timeout | UseDefault = USE_DEFAULT,
        stream: bool = False,
        credentials: bool = True,
    ) -> requests.Response:
        """Send one request; any status outside ``ok`` raises the matching ``HTTPStatusError``.

        With ``stream=True`` the body is left unread so callers can iterate it with bounded
        memory; they must close the response (it is a context manager). ``credentials=False``:
        the URL carries its own grant, so only ``headers`` are sent (see ``Request``).
        """
        request = Request(
            method,
            url,
            params,
            {**(self.headers if credentials else {}), **(headers or {})},
            content,
            self.timeout if isinstance(timeout, UseDefault) else timeout,
            stream,
            credentials,
        )
        response = self._send_following(request)
        if response.status_code in ok:
            return response
        with response, guard(method, url):
            body = response.raw.read(_ERROR_BODY_LIMIT, decode_content=True) if stream else response.content
        if not body:  # HEAD answers have none: the reason phrase (and a 401/403's challenge) must do
            challenge = response.headers.get("WWW-Authenticate")
            reason = response.reason or ""
            body = (f"{reason} ({challenge})" if challenge else reason).encode("latin-1", errors="replace")
        raise errors.error_for_status(
            method=method, url=response.url or url, status=response.status_code, headers=response.headers, body=body
        )

    def _send_following(self, request: Request) -> requests.Response:
        """Send ``request``, following up to ``MAX_REDIRECTS`` 307/308 answers with the same
        method, headers and body (a cluster node sends a stream's requests to the server of its
        shard: the server is trusted with the request, so is the peer it names). The
        ``Location`` carries the query string, so the parameters are not sent again."""
        for hop in range(MAX_REDIRECTS + 1):
            try:
                with guard(request.method, request.url):
                    response = self.transport.send(request)
            except errors.TransportError as exc:
                if hop == 0:
                    raise
                # The server answered and named a peer (a cluster's shard server) that does not: the
                # shard is moving, as a 503 would say; retried like one, unlike an unreachable server.
                raise errors.ServerError(
                    method=request.method,
                    url=request.url,
                    status=503,
                    message=f"the redirect's target did not answer: {exc}",
                    code="REDIRECT_TARGET_UNREACHABLE",
                    headers={},
                ) from exc
            location = response.headers.get("Location") if response.status_code in (307, 308) else None
            if not location:
                return response
            response.close()
            request = dataclasses.replace(request, url=urljoin(request.url, location), params=None)
        raise errors.TransportError(f"more than {MAX_REDIRECTS} redirects", method=request.method, url=request.url)


def whole_body(response: requests.Response, method: str) -> bytes:
    """The body of a response asked for with ``stream=True``, read in one piece. ``urllib3``
    fills one buffer straight from the socket; ``response.content`` gathers the body in 10 KiB
    pieces and joins them (twelve 10 MB file bodies over loopback: 26-36 ms of CPU against 103-122).
    Read to its end, the connection goes back to the pool as ``content`` would leave it."""
    with guard(method, response.url):
        body = response.raw.read(decode_content=True)
    assert isinstance(body, bytes)
    return body


@contextlib.contextmanager
def guard(method: str, url: str) -> Iterator[None]:
    """Translate requests' exceptions (also those raised while a body streams) into ours."""
    try:
        yield
    except requests.exceptions.SSLError as exc:
        if _certificate_refused(exc):
            raise errors.CertificateError(str(exc), method=method, url=url) from exc
        raise errors.ConnectError(str(exc), method=method, url=url) from exc
    except requests.Timeout as exc:
        raise errors.TimeoutError(str(exc), method=method, url=url) from exc
    except requests.ConnectionError as exc:
        if _caused_by(exc, urllib3.exceptions.NewConnectionError):
            raise errors.NotConnected(str(exc), method=method, url=url) from exc
        raise errors.ConnectError(str(exc), method=method, url=url) from exc
    except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
        if isinstance(exc, urllib3.exceptions.TimeoutError):
            raise errors.TimeoutError(str(exc), method=method, url=url) from exc
        raise errors.TransportError(str(exc), method=method, url=url) from exc


def _certificate_refused(exc: BaseException) -> bool:
    """Whether the TLS check refused the server's certificate."""
    return _caused_by(exc, ssl.SSLCertVerificationError)


def _caused_by(exc: BaseException, cause: type[BaseException]) -> bool:
    """Whether ``cause`` is behind ``exc`` (requests wraps causes in urllib3 errors, so the chain
    of causes, reasons and arguments is searched)."""
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending:
        error = pending.pop()
        if isinstance(error, cause):
            return True
        if id(error) not in seen:
            seen.add(id(error))
            linked = (error.__cause__, error.__context__, getattr(error, "reason", None), *error.args)
            pending.extend(item for item in linked if isinstance(item, BaseException))
    return False


def quote_segment(value: str) -> str:
    """URL-encode one path segment (offsets, bucket stream ids): nothing is left unescaped."""
    return quote(value, safe="")


def header(response: requests.Response, name: str) -> str | None:
    value: Any = response.headers.get(name)
    return str(value) if value is not None else None


def flag(response: requests.Response, name: str) -> bool:
    """Presence headers such as Stream-Closed count only when their value is ``true``."""
    return (header(response, name) or "").strip().lower() == "true"
