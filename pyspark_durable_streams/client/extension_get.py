"""A GET answered by one of our server's JSON extensions (read plans, time lookups), chosen by
its ``Accept`` media type.

A server that does not know the extension answers ``400``, ``405``, ``406`` or ``501``, or the
stream's messages themselves (it ignores the ``Accept``): both raise the caller's
*unavailable* error, so the caller falls back. The response is streamed, so messages a
server answers instead are never read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import errors
from ._http import HTTP, USE_DEFAULT, Timeout, UseDefault, guard
from .models import media_type

_UNKNOWN = (400, 405, 406, 501)


def get_extension_json(
    http: HTTP,
    url: str,
    params: Mapping[str, str],
    accept: str,
    unavailable: type[errors.DurableStreamsError],
    *,
    headers: Mapping[str, str] | None = None,
    timeout: Timeout | UseDefault = USE_DEFAULT,
) -> Any:
    """The JSON body of ``GET url?params`` with ``Accept: accept``; ``unavailable`` where the
    server offers no such answer. Other errors propagate as from any read."""
    try:
        response = http.request(
            "GET",
            url,
            ok=(200,),
            params=dict(params),
            headers={**(headers or {}), "Accept": accept},
            timeout=timeout,
            stream=True,
        )
    except errors.HTTPStatusError as exc:
        if exc.status in _UNKNOWN:
            raise unavailable(f"{url}: not offered ({exc})") from exc
        raise
    with response:
        if media_type(response.headers.get("Content-Type")) != accept:
            raise unavailable(f"{url}: the server does not offer {accept}")
        with guard("GET", url):
            return response.json()
