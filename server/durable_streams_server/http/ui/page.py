"""The status page's files: one HTML page, its script and style sheet, served from the package.

No build step and no external asset: the files in ``static/`` are what the browser runs, read
once and kept. Every answer carries a Content-Security-Policy allowing only this origin
(``default-src 'self'``, no inline script), so the page cannot reach another host even if a
stream's content tried to make it (messages are shown as text, never as markup).
"""

from __future__ import annotations

import functools
from pathlib import Path

from starlette.responses import Response

from ...protocol.errors import NotFound

STATIC = Path(__file__).with_name("static")
ASSETS = {
    "": ("index.html", "text/html; charset=utf-8"),
    "app.js": ("app.js", "text/javascript; charset=utf-8"),
    "style.css": ("style.css", "text/css; charset=utf-8"),
    "status-page.png": ("status-page.png", "image/png"),
}
"""``/ui/<name>`` -> (file in ``static/``, content type); ``/ui`` and ``/ui/`` are the page."""

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


@functools.cache
def _read(filename: str) -> bytes:
    return (STATIC / filename).read_bytes()


def asset(name: str) -> Response:
    """The answer for ``/ui/<name>``: a known file, or 404."""
    found = ASSETS.get(name)
    if found is None:
        raise NotFound(f"the status page has no file {name!r}", code="NOT_FOUND")
    filename, content_type = found
    headers = {"Content-Security-Policy": CSP, "Cache-Control": "no-cache", "Referrer-Policy": "no-referrer"}
    return Response(_read(filename), media_type=content_type, headers=headers)
